//! The nonce of a `nonce-tcp:` listener, as libdbus's dbus-nonce.c keeps
//! it: 16 random bytes in a file `nonce` of a fresh private directory
//! `$TMPDIR/dbus_nonce-XXXXXXXX` (mode 0700, the file 0600). A client
//! proves it can read the file by sending those 16 bytes first, before
//! SASL; a connection that sends anything else is closed.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;

/// A nonce and the file it was written to; dropping it removes both the
/// file and its directory.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct NonceFile {
    nonce: [u8; NONCE_LEN],
    dir: PathBuf,
    path: PathBuf,
}

impl NonceFile {
    /// A new nonce in a new directory under the temporary directory.
    pub fn create() -> io::Result<NonceFile> {
        NonceFile::create_in(&temporary_dir())
    }

    pub fn create_in(parent: &Path) -> io::Result<NonceFile> {
        let mut nonce = [0u8; NONCE_LEN];
        fill_random(&mut nonce)?;
        let mut suffix = [0u8; 8];
        fill_random(&mut suffix)?;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let suffix: String = suffix
            .iter()
            .map(|&b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
            .collect();
        let dir = parent.join(format!("dbus_nonce-{suffix}"));
        DirBuilder::new().mode(0o700).create(&dir).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))
        })?;
        let path = dir.join("nonce");
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| file.write_all(&nonce));
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(io::Error::new(
                e.kind(),
                format!("cannot write {}: {e}", path.display()),
            ));
        }
        Ok(NonceFile { nonce, dir, path })
    }

    pub fn nonce(&self) -> [u8; NONCE_LEN] {
        self.nonce
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for NonceFile {
    fn drop(&mut self) {
        if crate::restart::trying_the_state() {
            return; // the bus's file, not a restart's trial reader's
        }
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// libdbus's `_dbus_get_tmpdir`: TMPDIR, TMP, TEMP, else /tmp.
fn temporary_dir() -> PathBuf {
    ["TMPDIR", "TMP", "TEMP"]
        .iter()
        .find_map(|var| std::env::var_os(var).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// The kernel's randomness, or an error: a guessable nonce is no nonce.
fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_nonce_is_in_a_private_file_removed_on_drop() {
        let parent = std::env::temp_dir();
        let file = NonceFile::create_in(&parent).unwrap();
        assert_eq!(std::fs::read(file.path()).unwrap(), file.nonce());
        let dir = file.path().parent().unwrap().to_path_buf();
        assert!(dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("dbus_nonce-"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(file.path()), 0o600);
        let other = NonceFile::create_in(&parent).unwrap();
        assert_ne!(other.nonce(), file.nonce());
        drop(file);
        assert!(!dir.exists());
    }
}
