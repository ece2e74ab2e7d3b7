//! The daemon as the suites run it: a copy in a directory every user can
//! reach. Some subtests start it as another user (test-uid-permissions
//! as messagebus), and the daemon given may live in a checkout they
//! cannot enter (cloned as root into /root, mode 0700).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A copy of the daemon, removed (with its directory) on drop.
pub struct SharedDaemon {
    dir: PathBuf,
    path: PathBuf,
}

impl SharedDaemon {
    /// Copies `daemon` to `<temp>/quickbus-conformance-daemon.<pid>/`, the
    /// directory mode 0755 and the copy 0755 whatever the umask.
    pub fn copy(daemon: &Path) -> Result<SharedDaemon, String> {
        let dir = std::env::temp_dir().join(format!(
            "quickbus-conformance-daemon.{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let fail = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&dir)
            .map_err(|e| fail(&dir, e))?;
        let name = daemon
            .file_name()
            .ok_or_else(|| format!("{} names no file", daemon.display()))?;
        let shared = SharedDaemon {
            path: dir.join(name),
            dir,
        };
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(&shared.dir, open.clone()).map_err(|e| fail(&shared.dir, e))?;
        std::fs::copy(daemon, &shared.path).map_err(|e| fail(daemon, e))?;
        std::fs::set_permissions(&shared.path, open).map_err(|e| fail(&shared.path, e))?;
        Ok(shared)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SharedDaemon {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
