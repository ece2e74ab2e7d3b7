//! Copies of what another user must read or execute (the Python helpers,
//! a configuration file the daemon reads after dropping to its `<user>`),
//! in a directory every user can reach. The checkout itself may not be:
//! cloned as root into /root (mode 0700, Debian's default), nothing under
//! it is reachable by `nobody` or `messagebus`.
//!
//! The copies live as long as the test process (the next one removes
//! them), so they are for small files; a binary another user must run
//! (the daemon, the tool) is copied with [`crate::copy_executable`] into
//! the test's own [`crate::TempDir`], which goes with the test.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::process::{run_bounded, running};

const PREFIX: &str = "qb-e2e-shared-";

/// A copy of `file` that every user can read, and execute if `file` is
/// executable, made once per test process (later calls return the same
/// copy). Its name is `file`'s: the daemon under test is told from the
/// reference by its name.
pub fn shared_copy(file: &Path) -> PathBuf {
    static COPIES: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
    let mut copies = COPIES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, copy)) = copies.iter().find(|(from, _)| from == file) {
        return copy.clone();
    }
    let name = file
        .file_name()
        .unwrap_or_else(|| panic!("{} names no file", file.display()));
    // One directory per copy: two files of the same name may both be
    // needed (a daemon and the same name elsewhere).
    let dir = shared_dir().join(copies.len().to_string());
    make_reachable_dir(&dir);
    let copy = dir.join(name);
    // In a child process, as process::copy_executable says why; `a+rX`
    // whatever the umask made of the copy's mode.
    run_bounded(
        Command::new("sh")
            .args(["-c", "cp -- \"$1\" \"$2\" && chmod a+rX \"$2\"", "sh"])
            .arg(file)
            .arg(&copy),
    )
    .success();
    copies.push((file.to_owned(), copy.clone()));
    copy
}

/// This process's directory of shared copies, `<temp>/qb-e2e-shared-<pid>`
/// (made on first use; those of test processes that are gone are removed
/// then, since a process cannot remove its own at exit).
fn shared_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let temp = std::env::temp_dir();
        remove_stale_dirs(&temp);
        let dir = temp.join(format!("{PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        make_reachable_dir(&dir);
        assert_reachable(&dir);
        dir
    })
}

/// Creates `dir`, mode 0755 whatever the umask.
fn make_reachable_dir(dir: &Path) {
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(dir)
        .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod 755 {}: {e}", dir.display()));
}

/// Panics unless every directory from / down to `dir` lets other users
/// through (`o+x`): else the copies would be as unreachable as the
/// checkout, and every test using them would fail with a riddle.
fn assert_reachable(dir: &Path) {
    for ancestor in dir.ancestors() {
        let mode = std::fs::metadata(ancestor)
            .unwrap_or_else(|e| panic!("{}: {e}", ancestor.display()))
            .mode();
        assert!(
            mode & 0o001 != 0,
            "{} (mode {:o}) keeps other users out of {}: set TMPDIR to a directory every user can reach",
            ancestor.display(),
            mode & 0o7777,
            dir.display()
        );
    }
}

/// Removes `qb-e2e-shared-<pid>` directories in `temp` of this user whose
/// process is gone.
fn remove_stale_dirs(temp: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    let uid = rustix::process::geteuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let owned = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if owned && !running(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_the_name_and_is_readable_and_executable_as_the_original() {
        let source = crate::TempDir::new();
        let script = source.path().join("tool.sh");
        let data = source.path().join("data.txt");
        crate::write_executable(&script, "#!/bin/sh\necho hi\n");
        std::fs::write(&data, "data").unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o600)).unwrap();

        let script_copy = shared_copy(&script);
        let data_copy = shared_copy(&data);
        assert_eq!(script_copy.file_name().unwrap(), "tool.sh");
        assert_eq!(shared_copy(&script), script_copy, "one copy per file");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&script_copy), 0o755);
        assert_eq!(mode(&data_copy), 0o644);
        assert_eq!(mode(script_copy.parent().unwrap()), 0o755);
        assert_eq!(std::fs::read_to_string(&data_copy).unwrap(), "data");
        assert_reachable(&script_copy);
    }

    #[test]
    fn only_directories_of_processes_that_are_gone_are_removed() {
        let temp = crate::TempDir::new();
        // pid 1 runs; no pid is above the kernel's maximum (4194304).
        let alive = temp.path().join(format!("{PREFIX}1"));
        let gone = temp.path().join(format!("{PREFIX}4194305"));
        let other = temp.path().join("qb-e2e-other");
        for dir in [&alive, &gone, &other] {
            std::fs::create_dir(dir).unwrap();
        }
        remove_stale_dirs(temp.path());
        assert!(alive.exists() && other.exists());
        assert!(!gone.exists());
    }
}
