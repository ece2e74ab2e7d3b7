//! The DBUS_COOKIE_SHA1 keyring, as the spec and libdbus's dbus-keyring.c
//! keep it: `~/.dbus-keyrings/<context>` of the user the daemon runs as
//! (the directory must be private to that user: mode 0700 or stricter),
//! one `<id> <creation time> <hex cookie>` line per cookie. A cookie is
//! handed out for 5 minutes after its creation and dropped after 7; when
//! none is fresh, a new one is added under `<context>.lock` (created
//! exclusively; a lock older than the retries, 32 × 250 ms, is stale and
//! removed), the file rewritten through a temporary file renamed into
//! place, mode 0600.
//!
//! Blocking file I/O inside the event loop, as in dbus-daemon: a cookie is
//! read once per tcp authentication, never per message.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The context every D-Bus implementation uses.
pub const CONTEXT: &str = "org_freedesktop_general";
/// A cookie is handed out this long after its creation...
const NEW_KEY_SECONDS: i64 = 5 * 60;
/// ...and dropped from the file this long after.
const EXPIRE_KEY_SECONDS: i64 = NEW_KEY_SECONDS + 2 * 60;
/// Cookies dated further in the future than this are ignored.
const MAX_TIME_TRAVEL_SECONDS: i64 = 5 * 60;
const MAX_KEYS: usize = 256;
const COOKIE_BYTES: usize = 24;
const LOCK_TRIES: u32 = 32;
const LOCK_WAIT: Duration = Duration::from_millis(250);

/// One cookie: its id and its secret as the file writes it (hex).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cookie {
    pub id: u32,
    pub created: i64,
    pub hex: String,
}

/// The keyring of one user, in `dir`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Keyring {
    dir: PathBuf,
    uid: u32,
}

impl Keyring {
    /// The keyring of `uid` in `home`/.dbus-keyrings.
    pub fn new(home: &Path, uid: u32) -> Keyring {
        Keyring {
            dir: home.join(".dbus-keyrings"),
            uid,
        }
    }

    /// The keyring of the user this process runs as (home from
    /// /etc/passwd, as libdbus looks it up, else $HOME).
    pub fn of_current_user() -> Option<Keyring> {
        let uid = rustix::process::geteuid().as_raw();
        let home = home_from_passwd(&fs::read_to_string("/etc/passwd").unwrap_or_default(), uid)
            .or_else(|| std::env::var_os("HOME").map(PathBuf::from))?;
        Some(Keyring::new(&home, uid))
    }

    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Whether a DBUS_COOKIE_SHA1 identity (a number as libdbus reads one,
    /// or a user name) names the keyring's owner.
    pub fn names_owner(&self, identity: &str) -> bool {
        if let Some(uid) = super::numeric_uid::parse(identity.as_bytes()) {
            return uid == u64::from(self.uid);
        }
        let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
        passwd.lines().any(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            fields.len() >= 3 && fields[0] == identity && fields[2].parse() == Ok(self.uid)
        })
    }

    fn file(&self) -> PathBuf {
        self.dir.join(CONTEXT)
    }

    /// A cookie fresh enough to hand out, adding one when none is.
    pub fn best(&self) -> io::Result<Cookie> {
        self.ensure_private_dir()?;
        let now = unix_now();
        let fresh = |keys: &[Cookie]| {
            keys.iter()
                .find(|k| k.created > now - NEW_KEY_SECONDS)
                .cloned()
        };
        if let Some(cookie) = fresh(&self.load(now)) {
            return Ok(cookie);
        }
        let _lock = self.lock()?;
        // Another process may have added one meanwhile.
        let mut keys = self.load(now);
        if let Some(cookie) = fresh(&keys) {
            return Ok(cookie);
        }
        keys.truncate(MAX_KEYS - 1);
        let cookie = Cookie {
            id: new_id(&keys)?,
            created: now,
            hex: hex(&random_bytes::<COOKIE_BYTES>()?),
        };
        keys.push(cookie.clone());
        self.save(&keys)?;
        Ok(cookie)
    }

    /// The cookie `id`, if the file still has it.
    pub fn get(&self, id: u32) -> Option<Cookie> {
        self.ensure_private_dir().ok()?;
        self.load(unix_now()).into_iter().find(|k| k.id == id)
    }

    /// The unexpired, well-formed cookies of the file (none if it is
    /// missing or not ASCII, as libdbus).
    fn load(&self, now: i64) -> Vec<Cookie> {
        let text = fs::read(self.file()).unwrap_or_default();
        if !text.is_ascii() {
            tracing::warn!("{} is not ASCII: ignoring it", self.file().display());
            return Vec::new();
        }
        String::from_utf8_lossy(&text)
            .lines()
            .filter_map(parse_line)
            .filter(|k| k.created <= now + MAX_TIME_TRAVEL_SECONDS)
            .filter(|k| k.created >= now - EXPIRE_KEY_SECONDS)
            .take(MAX_KEYS)
            .collect()
    }

    fn save(&self, keys: &[Cookie]) -> io::Result<()> {
        let text: String = keys
            .iter()
            .map(|k| format!("{} {} {}\n", k.id, k.created, k.hex))
            .collect();
        let temporary = self
            .dir
            .join(format!("{CONTEXT}.{}.tmp", std::process::id()));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&temporary, self.file())
    }

    /// Create the directory (0700) if missing; refuse one others can
    /// enter, or owned by someone else.
    fn ensure_private_dir(&self) -> io::Result<()> {
        match DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = fs::metadata(&self.dir)?;
        if meta.uid() != self.uid || meta.mode() & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} directory ({}) is not private to the user",
                    CONTEXT,
                    self.dir.display()
                ),
            ));
        }
        Ok(())
    }

    fn lock(&self) -> io::Result<LockFile> {
        let path = self.dir.join(format!("{CONTEXT}.lock"));
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
        };
        for _ in 0..LOCK_TRIES {
            match create() {
                Ok(_) => return Ok(LockFile(path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => std::thread::sleep(LOCK_WAIT),
                Err(e) => return Err(e),
            }
        }
        // Whoever held it that long is gone: a stale lock.
        let _ = fs::remove_file(&path);
        create().map(|_| LockFile(path))
    }
}

/// Removes the lock file when dropped.
struct LockFile(PathBuf);

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn parse_line(line: &str) -> Option<Cookie> {
    let mut words = line.split_ascii_whitespace();
    let id: u32 = words.next()?.parse().ok()?;
    let created: i64 = words.next()?.parse().ok()?;
    let hex = words.next()?;
    let valid = id <= i32::MAX as u32
        && created >= 0
        && !hex.is_empty()
        && hex.len() % 2 == 0
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && words.next().is_none();
    valid.then(|| Cookie {
        id,
        created,
        hex: hex.to_ascii_lowercase(),
    })
}

/// A positive id no cookie of `keys` has.
fn new_id(keys: &[Cookie]) -> io::Result<u32> {
    loop {
        let id = u32::from_ne_bytes(random_bytes::<4>()?) & 0x7fff_ffff;
        if !keys.iter().any(|k| k.id == id) {
            return Ok(id);
        }
    }
}

fn home_from_passwd(passwd: &str, uid: u32) -> Option<PathBuf> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[2].parse() == Ok(uid) && !fields[5].is_empty())
            .then(|| PathBuf::from(fields[5]))
    })
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Bytes from the kernel's randomness, or an error: a guessable secret is
/// no secret.
pub fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(buf)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qb-keyring-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn own_uid() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    #[test]
    fn a_fresh_cookie_is_created_once_and_found_again() {
        let home = scratch("fresh");
        let ring = Keyring::new(&home, own_uid());
        let first = ring.best().unwrap();
        assert_eq!(first.hex.len(), 2 * COOKIE_BYTES);
        assert_eq!(ring.best().unwrap(), first, "still fresh: reused");
        assert_eq!(ring.get(first.id), Some(first.clone()));
        assert_eq!(ring.get(first.id.wrapping_add(1)), None);
        let dir = home.join(".dbus-keyrings");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(CONTEXT)), 0o600);
        assert!(!dir.join(format!("{CONTEXT}.lock")).exists());
        fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn old_cookies_are_not_handed_out_and_expired_ones_dropped() {
        let home = scratch("old");
        let ring = Keyring::new(&home, own_uid());
        ring.ensure_private_dir().unwrap();
        let now = unix_now();
        let stale = format!("7 {} {}\n", now - 6 * 60, "ab".repeat(24));
        let expired = format!("8 {} {}\n", now - 8 * 60, "cd".repeat(24));
        let future = format!("9 {} {}\n", now + 6 * 60, "ef".repeat(24));
        fs::write(
            home.join(".dbus-keyrings").join(CONTEXT),
            stale.clone() + &expired + &future + "junk\n",
        )
        .unwrap();
        assert!(
            ring.get(7).is_some(),
            "still valid for answering a challenge"
        );
        assert!(ring.get(8).is_none());
        assert!(ring.get(9).is_none());
        let new = ring.best().unwrap();
        assert!(new.id != 7 && new.created >= now);
        let text = fs::read_to_string(home.join(".dbus-keyrings").join(CONTEXT)).unwrap();
        assert!(text.starts_with(&stale), "{text}");
        assert_eq!(text.lines().count(), 2, "{text}");
        fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn a_directory_others_can_enter_is_refused() {
        let home = scratch("open");
        let dir = home.join(".dbus-keyrings");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let err = Keyring::new(&home, own_uid()).best().unwrap_err();
        assert!(err.to_string().contains("not private"), "{err}");
        let other = Keyring::new(&home, own_uid().wrapping_add(1));
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(other.best().is_err(), "owned by someone else");
        fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn homes_come_from_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        assert_eq!(
            home_from_passwd(passwd, 1000),
            Some(PathBuf::from("/home/alice"))
        );
        assert_eq!(home_from_passwd(passwd, 7), None);
    }
}
