//! User and group names and ids as the system resolves them: through NSS
//! (`getpwnam_r`, `getgrnam_r`, `getgrouplist`, by way of `nix`), so users
//! that sssd, LDAP, systemd-homed or nss-systemd (`DynamicUser=`) provide
//! count like those of /etc/passwd. A number is taken as an id, as
//! dbus-daemon does.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::unistd::{Gid, Group, Uid, User};
use quickbus_bus::UserGroups;

use crate::dynamic_users::DynamicUsers;

/// Tell nss-systemd not to ask the bus (which would be this daemon, busy
/// asking NSS) when resolving users, as dbus-daemon does. Call while the
/// process has one thread.
pub fn bypass_bus_in_nss() {
    std::env::set_var("SYSTEMD_NSS_BYPASS_BUS", "1");
}

/// The system's user database, asked anew at each question: NSS, then
/// systemd's dynamic users (which NSS cannot see from inside the bus, see
/// [`crate::dynamic_users`]).
#[derive(Clone, Debug)]
pub struct UserDb {
    dynamic: Option<DynamicUsers>,
}

impl Default for UserDb {
    fn default() -> UserDb {
        UserDb::with_dynamic_users(DynamicUsers::default())
    }
}

impl UserDb {
    pub fn load() -> UserDb {
        UserDb::default()
    }

    /// NSS, and the dynamic users of `dynamic` (the tests' stand-in).
    pub fn with_dynamic_users(dynamic: DynamicUsers) -> UserDb {
        UserDb {
            dynamic: Some(dynamic),
        }
    }

    /// NSS alone.
    pub fn nss_only() -> UserDb {
        UserDb { dynamic: None }
    }

    /// The uid of user `name`, or `name` itself if it is a number.
    pub fn uid(&self, name: &str) -> Option<u32> {
        name.parse()
            .ok()
            .or_else(|| Some(User::from_name(name).ok()??.uid.as_raw()))
            .or_else(|| self.dynamic.as_ref()?.uid(name))
    }

    /// The gid of group `name`, or `name` itself if it is a number. A
    /// dynamic user's group has its name and number.
    pub fn gid(&self, name: &str) -> Option<u32> {
        name.parse()
            .ok()
            .or_else(|| Some(Group::from_name(name).ok()??.gid.as_raw()))
            .or_else(|| self.dynamic.as_ref()?.uid(name))
    }

    /// The uid and primary gid of the user called `name` (or numbered so).
    pub fn account(&self, name: &str) -> Option<(u32, u32)> {
        let user = match name.parse::<u32>() {
            Ok(uid) => User::from_uid(Uid::from_raw(uid)),
            Err(_) => User::from_name(name),
        };
        if let Ok(Some(user)) = user {
            return Some((user.uid.as_raw(), user.gid.as_raw()));
        }
        let dynamic = self.dynamic.as_ref()?;
        let uid = match name.parse::<u32>() {
            Ok(uid) => dynamic.name(uid).map(|_| uid),
            Err(_) => dynamic.uid(name),
        }?;
        Some((uid, uid))
    }

    /// The groups of `uid` as dbus-daemon takes them for policy decisions
    /// where the kernel gave none: `getgrouplist` of its user (primary
    /// group and every group listing it), sorted, without repeats.
    pub fn groups_of(&self, uid: u32) -> UserGroups {
        self.nss_groups_of(uid)
            .or_else(|| self.dynamic_groups_of(uid))
            .unwrap_or(UserGroups::UnknownUser)
    }

    fn nss_groups_of(&self, uid: u32) -> Option<UserGroups> {
        let user = User::from_uid(Uid::from_raw(uid)).ok()??;
        Some(known_groups(&user.name, user.gid.as_raw()))
    }

    /// A dynamic user's primary group is its own, numbered as it is.
    fn dynamic_groups_of(&self, uid: u32) -> Option<UserGroups> {
        let name = self.dynamic.as_ref()?.name(uid)?;
        Some(known_groups(&name, uid))
    }
}

fn known_groups(name: &str, primary: u32) -> UserGroups {
    UserGroups::Known(group_list(name, primary).unwrap_or_else(|| vec![primary]))
}

/// `getgrouplist(name, primary)`, sorted and without repeats: the groups
/// `initgroups` would give the user.
pub fn group_list(name: &str, primary: u32) -> Option<Vec<u32>> {
    let name = CString::new(name).ok()?;
    let mut groups: Vec<u32> = nix::unistd::getgrouplist(&name, Gid::from_raw(primary))
        .ok()?
        .into_iter()
        .map(Gid::as_raw)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    Some(groups)
}

/// How long a uid's groups are trusted without asking NSS again. The
/// files of the "files" source are watched as well (see
/// [`CachedUserDb`]); this bounds how stale other sources' answers get.
const GROUPS_TTL: Duration = Duration::from_secs(30);

/// The user database as the daemon consults it for every new connection:
/// each uid's groups are remembered, so a client reconnecting in a loop
/// does not cost an NSS lookup (a scan of /etc/group, or a round trip to
/// sssd) each time. The memory is dropped when /etc/passwd or /etc/group
/// change (size, modification time or inode: a stat each, far cheaper
/// than a lookup) and after [`GROUPS_TTL`], so accounts added meanwhile
/// count from the next connection on. Unknown users are not remembered:
/// an account created meanwhile counts at once. Nor are dynamic users
/// (two readlinks, no NSS): they come and go with their units, and a uid
/// released and given to another unit must not keep the old answer.
pub struct CachedUserDb {
    db: UserDb,
    watched: [PathBuf; 2],
    seen: Option<[FileStamp; 2]>,
    groups: HashMap<u32, (UserGroups, Instant)>,
}

/// What tells that a file changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        inode: meta.ino(),
    })
}

impl CachedUserDb {
    /// NSS, with the local files watched.
    pub fn system() -> CachedUserDb {
        CachedUserDb::watching(Path::new("/etc/passwd"), Path::new("/etc/group"))
    }

    fn watching(passwd: &Path, group: &Path) -> CachedUserDb {
        CachedUserDb {
            db: UserDb::load(),
            watched: [passwd.to_owned(), group.to_owned()],
            seen: None,
            groups: HashMap::new(),
        }
    }

    /// Ask NSS afresh about everyone (a configuration reload: dbus-daemon
    /// flushes its user cache then too).
    pub fn forget(&mut self) {
        self.groups.clear();
    }

    /// The groups of `uid`, as NSS said at most [`GROUPS_TTL`] ago and
    /// since the last change of the watched files.
    pub fn groups_of(&mut self, uid: u32) -> UserGroups {
        let now = stamp(&self.watched[0])
            .zip(stamp(&self.watched[1]))
            .map(|(p, g)| [p, g]);
        if now != self.seen {
            self.groups.clear();
            self.seen = now;
        }
        if let Some((groups, at)) = self.groups.get(&uid) {
            if at.elapsed() < GROUPS_TTL {
                return groups.clone();
            }
        }
        match self.db.nss_groups_of(uid) {
            Some(groups) => {
                self.groups.insert(uid, (groups.clone(), Instant::now()));
                groups
            }
            None => self
                .db
                .dynamic_groups_of(uid)
                .unwrap_or(UserGroups::UnknownUser),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // These ask the machine's NSS, which every Linux system sets up with
    // root (uid 0, gid 0) at least.

    /// Set in the environment of a copy of this test binary that runs only
    /// [`the_bus_bypass_reaches_the_environment`]: changing the
    /// environment while other tests' threads read it (NSS does) is not
    /// safe, so the change happens in a process of its own.
    const BYPASS_CHILD: &str = "QUICKBUS_TEST_BYPASS_CHILD";

    #[test]
    fn the_bus_bypass_reaches_the_environment() {
        if std::env::var_os(BYPASS_CHILD).is_some() {
            bypass_bus_in_nss();
            let seen = std::process::Command::new("/bin/sh")
                .args(["-c", "printf %s \"$SYSTEMD_NSS_BYPASS_BUS\""])
                .output()
                .unwrap();
            assert_eq!(seen.stdout, b"1");
            return;
        }
        let _starting = crate::test_forks::starting_programs();
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "userdb::tests::the_bus_bypass_reaches_the_environment",
            ])
            .env(BYPASS_CHILD, "1")
            .env_remove("SYSTEMD_NSS_BYPASS_BUS")
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&child.stdout);
        // Exactly this test ran in the child, and passed.
        assert!(
            child.status.success() && report.contains("1 passed"),
            "{report}"
        );
    }

    #[test]
    fn names_and_numbers_resolve() {
        let db = UserDb::load();
        assert_eq!(db.uid("root"), Some(0));
        assert_eq!(db.gid("root"), Some(0));
        assert_eq!(db.uid("1234"), Some(1234));
        assert_eq!(db.gid("4321"), Some(4321));
        assert_eq!(db.uid("no-such-user-quickbus"), None);
        assert_eq!(db.gid("no-such-group-quickbus"), None);
        assert_eq!(db.uid(""), None);
        assert_eq!(db.gid("*"), None);
        assert_eq!(db.account("root"), Some((0, 0)));
        assert_eq!(db.account("0"), Some((0, 0)));
        assert_eq!(db.account("no-such-user-quickbus"), None);
    }

    #[test]
    fn groups_come_from_getgrouplist() {
        let db = UserDb::load();
        let UserGroups::Known(groups) = db.groups_of(0) else {
            panic!("root has no groups");
        };
        assert!(groups.contains(&0), "{groups:?}");
        assert!(groups.windows(2).all(|w| w[0] < w[1]), "{groups:?}");
        // A uid no account has.
        assert_eq!(db.groups_of(3_999_999_999), UserGroups::UnknownUser);
    }

    /// A stand-in for /run/systemd/dynamic-uid holding one allocated
    /// dynamic user, as PID 1 lays it out.
    fn fake_dynamic_uid_dir(tag: &str, name: &str, uid: u32) -> PathBuf {
        use std::os::unix::fs::symlink;
        let dir = std::env::temp_dir().join(format!("qb-userdb-dyn-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        symlink(uid.to_string(), dir.join(format!("direct:{name}"))).unwrap();
        symlink(name, dir.join(format!("direct:{uid}"))).unwrap();
        dir
    }

    /// A uid and a name that NSS knows nothing about.
    const DYN_UID: u32 = 3_999_999_123;
    const DYN_NAME: &str = "qb-test-dynamic-user";

    #[test]
    fn dynamic_users_resolve_where_nss_does_not() {
        let dir = fake_dynamic_uid_dir("db", DYN_NAME, DYN_UID);
        let without = UserDb::with_dynamic_users(DynamicUsers::at(&dir.join("absent")));
        assert_eq!(without.uid(DYN_NAME), None);
        assert_eq!(without.groups_of(DYN_UID), UserGroups::UnknownUser);

        let db = UserDb::with_dynamic_users(DynamicUsers::at(&dir));
        assert_eq!(db.uid(DYN_NAME), Some(DYN_UID));
        assert_eq!(db.gid(DYN_NAME), Some(DYN_UID));
        assert_eq!(db.account(DYN_NAME), Some((DYN_UID, DYN_UID)));
        assert_eq!(db.account(&DYN_UID.to_string()), Some((DYN_UID, DYN_UID)));
        assert_eq!(db.groups_of(DYN_UID), UserGroups::Known(vec![DYN_UID]));
        // NSS still answers first.
        assert_eq!(db.uid("root"), Some(0));
        assert_eq!(db.account("root"), Some((0, 0)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_cache_asks_about_dynamic_users_every_time() {
        let dir = fake_dynamic_uid_dir("cache", DYN_NAME, DYN_UID);
        let mut cache = CachedUserDb::system();
        cache.db = UserDb::with_dynamic_users(DynamicUsers::at(&dir));
        assert_eq!(cache.groups_of(DYN_UID), UserGroups::Known(vec![DYN_UID]));
        assert!(!cache.groups.contains_key(&DYN_UID));
        // The unit stopped: PID 1 removed the links, the uid is nobody's.
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(cache.groups_of(DYN_UID), UserGroups::UnknownUser);
    }

    #[test]
    fn the_cache_forgets_when_the_watched_files_change() {
        let dir = std::env::temp_dir().join(format!("qb-userdb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (passwd, group) = (dir.join("passwd"), dir.join("group"));
        std::fs::write(&passwd, "a\n").unwrap();
        std::fs::write(&group, "b\n").unwrap();
        let mut cache = CachedUserDb::watching(&passwd, &group);
        let root = cache.groups_of(0);
        assert!(matches!(root, UserGroups::Known(_)));
        // A remembered answer is served from memory...
        cache
            .groups
            .insert(0, (UserGroups::Known(vec![42]), Instant::now()));
        assert_eq!(cache.groups_of(0), UserGroups::Known(vec![42]));
        // ...until a watched file changes (it grows, so its stamp changes
        // even within one mtime tick).
        std::fs::write(&group, "b\nc\n").unwrap();
        assert_eq!(cache.groups_of(0), root);
        // Unknown users are asked about every time.
        assert_eq!(cache.groups_of(3_999_999_999), UserGroups::UnknownUser);
        assert!(!cache.groups.contains_key(&3_999_999_999));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
