//! systemd's `DynamicUser=` accounts, read from the links PID 1 keeps for
//! bus daemons in /run/systemd/dynamic-uid: `direct:NAME` points to the
//! uid, `direct:UID` to the name, both world-readable, for as long as a
//! unit uses the account.
//!
//! NSS cannot tell the bus about these users: systemd starts dbus.service
//! with `SYSTEMD_NSS_DYNAMIC_BYPASS=1` (so that nss-systemd never blocks
//! on PID 1 while PID 1 waits on the bus), and nss-systemd then answers
//! "not found" for every dynamic user (systemd 250.4 and later; it no
//! longer reads these links itself). systemd's dynamic-user.c keeps the
//! links for exactly this reader: "dbus-daemon cannot use D-Bus for
//! resolving users and groups". The user database asks here when NSS
//! does not know a name or uid.

use std::path::{Path, PathBuf};

/// Where PID 1 keeps the links.
const SYSTEMD_DIR: &str = "/run/systemd/dynamic-uid";

/// The dynamic users PID 1 has allocated now.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DynamicUsers {
    dir: PathBuf,
}

impl Default for DynamicUsers {
    fn default() -> DynamicUsers {
        DynamicUsers::at(Path::new(SYSTEMD_DIR))
    }
}

impl DynamicUsers {
    /// The links under `dir` (the tests' stand-in for systemd's directory).
    pub fn at(dir: &Path) -> DynamicUsers {
        DynamicUsers {
            dir: dir.to_owned(),
        }
    }

    /// The uid of the dynamic user `name`. Both links must agree, so a
    /// half-written or half-removed pair (PID 1 writes and removes them
    /// one after the other) counts as no user.
    pub fn uid(&self, name: &str) -> Option<u32> {
        if !is_valid_name(name) {
            return None;
        }
        let uid: u32 = self.link(name)?.parse().ok()?;
        (self.name(uid)? == name).then_some(uid)
    }

    /// The name of the dynamic user numbered `uid`.
    pub fn name(&self, uid: u32) -> Option<String> {
        let name = self.link(&uid.to_string())?;
        is_valid_name(&name).then_some(name)
    }

    fn link(&self, key: &str) -> Option<String> {
        let target = std::fs::read_link(self.dir.join(format!("direct:{key}"))).ok()?;
        target.into_os_string().into_string().ok()
    }
}

/// A name systemd could have given a dynamic user (its
/// `valid_user_group_name` in the relaxed form unit files may use): not a
/// number, so that a link named after a uid is never read as a name, and
/// nothing that could leave the directory or break a line of text.
fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with(['.', '-'])
        && name.parse::<u32>().is_err()
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A directory laid out as PID 1 lays out /run/systemd/dynamic-uid.
    struct FakeRun(PathBuf);

    impl FakeRun {
        fn new(tag: &str) -> FakeRun {
            let dir =
                std::env::temp_dir().join(format!("qb-dynamic-uid-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            FakeRun(dir)
        }

        fn allocate(&self, name: &str, uid: u32) {
            symlink(uid.to_string(), self.0.join(format!("direct:{name}"))).unwrap();
            symlink(name, self.0.join(format!("direct:{uid}"))).unwrap();
        }
    }

    impl Drop for FakeRun {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn an_allocated_user_resolves_both_ways() {
        let run = FakeRun::new("both");
        run.allocate("boottestdyn", 61234);
        let users = DynamicUsers::at(&run.0);
        assert_eq!(users.uid("boottestdyn"), Some(61234));
        assert_eq!(users.name(61234).as_deref(), Some("boottestdyn"));
        assert_eq!(users.uid("other"), None);
        assert_eq!(users.name(61235), None);
    }

    #[test]
    fn a_half_pair_or_a_strange_link_is_no_user() {
        let run = FakeRun::new("half");
        // Only the name's link (PID 1 removing the pair, or writing it).
        symlink("61300", run.0.join("direct:halfway")).unwrap();
        // Links that disagree.
        run.allocate("first", 61301);
        symlink("61301", run.0.join("direct:second")).unwrap();
        // A uid link whose target is no user name.
        symlink("../../etc/passwd", run.0.join("direct:61302")).unwrap();
        symlink("not a number", run.0.join("direct:garbage")).unwrap();
        let users = DynamicUsers::at(&run.0);
        assert_eq!(users.uid("halfway"), None);
        assert_eq!(users.uid("first"), Some(61301));
        assert_eq!(users.uid("second"), None);
        assert_eq!(users.name(61302), None);
        assert_eq!(users.uid("garbage"), None);
        // Names that are no names never reach the file system.
        assert_eq!(users.uid("61301"), None);
        assert_eq!(users.uid("../x"), None);
        assert_eq!(users.uid(""), None);
        assert_eq!(users.uid(".."), None);
    }

    #[test]
    fn no_directory_means_no_dynamic_users() {
        let users = DynamicUsers::at(Path::new("/nonexistent/quickbus-dynamic-uid"));
        assert_eq!(users.uid("boottestdyn"), None);
        assert_eq!(users.name(61234), None);
    }
}
