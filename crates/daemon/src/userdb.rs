//! User and group names to ids, from /etc/passwd and /etc/group (no NSS:
//! names only other databases know resolve as unknown, with a warning
//! where they are used). A number is taken as an id, as dbus-daemon does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use quickbus_bus::UserGroups;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserDb {
    users: HashMap<String, u32>,
    groups: HashMap<String, u32>,
    /// uid to (name, primary gid), the first entry of each uid.
    accounts: HashMap<u32, (String, u32)>,
    /// gid and the user names /etc/group lists as members.
    members: Vec<(u32, Vec<String>)>,
}

/// The system's user database as the daemon consults it for every new
/// connection: parsed once and re-read only when /etc/passwd or /etc/group
/// changed (size, modification time or inode), so a connection costs two
/// `stat` calls instead of parsing both files (callgrind: 387K instructions
/// per connection with a re-read each time). Accounts added meanwhile
/// still count from the next connection on, and a file that cannot be read
/// (out of fds, say) keeps the last good copy instead of making every
/// user unknown.
pub struct CachedUserDb {
    passwd: PathBuf,
    group: PathBuf,
    seen: Option<[FileStamp; 2]>,
    db: UserDb,
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
    /// The system's files.
    pub fn system() -> CachedUserDb {
        CachedUserDb::of_files(Path::new("/etc/passwd"), Path::new("/etc/group"))
    }

    pub fn of_files(passwd: &Path, group: &Path) -> CachedUserDb {
        CachedUserDb {
            passwd: passwd.to_owned(),
            group: group.to_owned(),
            seen: None,
            db: UserDb::default(),
        }
    }

    /// The database as the files are now.
    pub fn current(&mut self) -> &UserDb {
        let now = stamp(&self.passwd)
            .zip(stamp(&self.group))
            .map(|(p, g)| [p, g]);
        if now.is_some() && now != self.seen {
            let read = |p: &Path| std::fs::read_to_string(p).ok();
            if let (Some(passwd), Some(group)) = (read(&self.passwd), read(&self.group)) {
                self.db = UserDb::from_texts(&passwd, &group);
                self.seen = now;
            }
        }
        &self.db
    }
}

/// `name:password:id:...` lines split into fields. Comments, blank and
/// malformed lines (no name, no numeric third field) are skipped.
fn records(text: &str) -> impl Iterator<Item = (&str, u32, Vec<&str>)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let name = *fields.first()?;
            let id = fields.get(2)?.parse().ok()?;
            (!name.is_empty()).then_some((name, id, fields))
        })
}

fn parse_ids(text: &str) -> HashMap<String, u32> {
    records(text)
        .map(|(name, id, _)| (name.to_owned(), id))
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
        let mut accounts = HashMap::new();
        for (name, uid, fields) in records(passwd) {
            if let Some(gid) = fields.get(3).and_then(|g| g.parse().ok()) {
                accounts
                    .entry(uid)
                    .or_insert_with(|| (name.to_owned(), gid));
            }
        }
        let members = records(group)
            .map(|(_, gid, fields)| {
                let list = fields.get(3).copied().unwrap_or_default();
                let names = list
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect();
                (gid, names)
            })
            .collect();
        UserDb {
            users: parse_ids(passwd),
            groups: parse_ids(group),
            accounts,
            members,
        }
    }

    pub fn uid(&self, name: &str) -> Option<u32> {
        name.parse().ok().or_else(|| self.users.get(name).copied())
    }

    pub fn gid(&self, name: &str) -> Option<u32> {
        name.parse().ok().or_else(|| self.groups.get(name).copied())
    }

    /// The uid and primary gid of the user called `name` (or numbered so).
    pub fn account(&self, name: &str) -> Option<(u32, u32)> {
        let uid = self.uid(name)?;
        self.accounts.get(&uid).map(|(_, gid)| (uid, *gid))
    }

    /// The groups of `uid` as dbus-daemon takes them for policy decisions
    /// (`getgrouplist` of its user): the primary group, then every group
    /// listing the user as a member, sorted, without repeats.
    pub fn groups_of(&self, uid: u32) -> UserGroups {
        let Some((name, primary)) = self.accounts.get(&uid) else {
            return UserGroups::UnknownUser;
        };
        let mut groups = vec![*primary];
        for (gid, names) in &self.members {
            if names.iter().any(|n| n == name) {
                groups.push(*gid);
            }
        }
        groups.sort_unstable();
        groups.dedup();
        UserGroups::Known(groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_rereads_changed_files_and_keeps_the_last_good_copy() {
        let dir = std::env::temp_dir().join(format!("qb-userdb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (passwd, group) = (dir.join("passwd"), dir.join("group"));
        std::fs::write(&passwd, "alice:x:1000:1000::/home/alice:/bin/sh\n").unwrap();
        std::fs::write(&group, "alice:x:1000:\n").unwrap();
        let mut cache = CachedUserDb::of_files(&passwd, &group);
        assert_eq!(cache.current().uid("alice"), Some(1000));
        assert_eq!(cache.current().uid("bob"), None);
        // A new account (the file grows, so its stamp changes even within
        // one mtime tick).
        std::fs::write(
            &passwd,
            "alice:x:1000:1000::/home/alice:/bin/sh\nbob:x:1001:1000::/home/bob:/bin/sh\n",
        )
        .unwrap();
        assert_eq!(cache.current().uid("bob"), Some(1001));
        // Unreadable files keep what was known.
        std::fs::remove_file(&group).unwrap();
        assert_eq!(cache.current().uid("bob"), Some(1001));
        std::fs::remove_dir_all(&dir).unwrap();
    }

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

    #[test]
    fn groups_come_from_the_primary_group_and_member_lists() {
        let db = UserDb::from_texts(
            "alice:x:1000:1000::/home/alice:/bin/sh\nbob:x:1001:100::/:/bin/sh\n",
            "alice:x:1000:\nusers:x:100:alice,carol\nwheel:x:10:alice\nstaff:x:50:bob\n",
        );
        assert_eq!(db.groups_of(1000), UserGroups::Known(vec![10, 100, 1000]));
        assert_eq!(db.groups_of(1001), UserGroups::Known(vec![50, 100]));
        assert_eq!(db.groups_of(4321), UserGroups::UnknownUser);
        assert_eq!(db.account("bob"), Some((1001, 100)));
        assert_eq!(db.account("1000"), Some((1000, 1000)));
        assert_eq!(db.account("carol"), None);
    }
}
