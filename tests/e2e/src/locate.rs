//! Where the programs under test live, and scratch directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

const DAEMON_ENV: &str = "QUICKBUS_TEST_DAEMON";
const PYTHON_ENV: &str = "QUICKBUS_TEST_PYTHON";
const DAEMON_NAME: &str = "quickbus-daemon";

/// The daemon binary under test: `$QUICKBUS_TEST_DAEMON`, else
/// `quickbus-daemon` next to this test's own target directory (which follows
/// `CARGO_TARGET_DIR` and the build profile), else `target/debug` of the
/// workspace. Panics with a hint when none exists.
pub fn daemon_path() -> PathBuf {
    if let Some(path) = std::env::var_os(DAEMON_ENV) {
        return PathBuf::from(path);
    }
    let candidates = daemon_candidates();
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no {DAEMON_NAME} binary found (looked at {candidates:?}); \
                 run `cargo build -p quickbus-daemon` first or set {DAEMON_ENV}"
            )
        })
}

/// Whether the daemon under test is quickbus (and not the reference
/// dbus-daemon). Tests choose their assertions with it; a test of a
/// promise only quickbus makes starts with [`crate::skip::quickbus_only`]
/// instead, so that it is skipped visibly (or fails) against the reference.
pub fn testing_quickbus() -> bool {
    daemon_path()
        .file_name()
        .is_some_and(|name| name.to_string_lossy().contains("quickbus"))
}

fn daemon_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    // Test binaries live in <target>/<profile>/deps/; the daemon in <target>/<profile>/.
    if let Ok(exe) = std::env::current_exe() {
        if let Some(profile_dir) = exe.parent().and_then(Path::parent) {
            candidates.push(profile_dir.join(DAEMON_NAME));
        }
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(target).join("debug").join(DAEMON_NAME));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    candidates.push(workspace.join("target/debug").join(DAEMON_NAME));
    candidates
}

/// The Python interpreter that has dbus-python: `$QUICKBUS_TEST_PYTHON`, else
/// Debian's `/usr/bin/python3` (a `python3` earlier on PATH, e.g. pyenv's,
/// usually lacks the `dbus` module).
pub fn python_path() -> PathBuf {
    std::env::var_os(PYTHON_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/python3"))
}

/// A helper script from `tests/e2e/python/`.
pub fn python_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(name)
}

/// A fresh directory under the system temp dir, removed on drop. Short
/// paths on purpose: unix socket paths are limited to 108 bytes.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new() -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let unique = format!(
            "qb-e2e-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(unique);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|err| panic!("creating {}: {err}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Default for TempDir {
    fn default() -> Self {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_dirs_are_distinct_and_removed_on_drop() {
        let first = TempDir::new();
        let second = TempDir::new();
        assert_ne!(first.path(), second.path());
        let path = first.path().to_owned();
        assert!(path.is_dir());
        std::fs::write(path.join("file"), "x").unwrap();
        drop(first);
        assert!(!path.exists());
    }

    #[test]
    fn the_daemon_is_looked_for_next_to_the_test_binary_first() {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap();
        assert_eq!(daemon_candidates()[0], profile_dir.join(DAEMON_NAME));
    }

    #[test]
    fn the_peer_script_exists() {
        assert!(python_script("peer.py").is_file());
    }
}
