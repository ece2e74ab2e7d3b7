//! User and group names to ids, from /etc/passwd and /etc/group (no NSS:
//! names only other databases know resolve as unknown, with a warning
//! where they are used). A number is taken as an id, as dbus-daemon does.

use std::collections::HashMap;
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserDb {
    users: HashMap<String, u32>,
    groups: HashMap<String, u32>,
}

/// `name:password:id:...` lines: name to the third field. Comments, blank
/// and malformed lines are skipped.
fn parse_ids(text: &str) -> HashMap<String, u32> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let id = fields.nth(1)?.parse().ok()?;
            (!name.is_empty()).then(|| (name.to_owned(), id))
        })
        .collect()
}

impl UserDb {
    /// Read the system's files; a missing file means no names.
    pub fn load() -> UserDb {
        UserDb::from_files(Path::new("/etc/passwd"), Path::new("/etc/group"))
    }

    pub fn from_files(passwd: &Path, group: &Path) -> UserDb {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        UserDb::from_texts(&read(passwd), &read(group))
    }

    pub fn from_texts(passwd: &str, group: &str) -> UserDb {
        UserDb {
            users: parse_ids(passwd),
            groups: parse_ids(group),
        }
    }

    pub fn uid(&self, name: &str) -> Option<u32> {
        name.parse().ok().or_else(|| self.users.get(name).copied())
    }

    pub fn gid(&self, name: &str) -> Option<u32> {
        name.parse().ok().or_else(|| self.groups.get(name).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_resolve() {
        let db = UserDb::from_texts(
            "root:x:0:0:root:/root:/bin/bash\n# comment\nnobody:x:65534:65534::/:/sbin/nologin\nbroken\n:x:5:5\n",
            "root:x:0:\nwheel:x:10:alice\n",
        );
        assert_eq!(db.uid("root"), Some(0));
        assert_eq!(db.uid("nobody"), Some(65534));
        assert_eq!(db.uid("1234"), Some(1234));
        assert_eq!(db.uid("broken"), None);
        assert_eq!(db.uid(""), None);
        assert_eq!(db.uid("wheel"), None);
        assert_eq!(db.gid("wheel"), Some(10));
        assert_eq!(db.gid("*"), None);
    }
}
