//! Where the programs under test live, and scratch directories.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

const DAEMON_ENV: &str = "QUICKBUS_TEST_DAEMON";
const PYTHON_ENV: &str = "QUICKBUS_TEST_PYTHON";
const DAEMON_NAME: &str = "quickbus-daemon";

/// The daemon binary under test: `$QUICKBUS_TEST_DAEMON` when set (any
/// program with dbus-daemon's command line, e.g. `/usr/bin/dbus-daemon`),
/// else [`quickbus_daemon_path`].
pub fn daemon_path() -> PathBuf {
    match std::env::var_os(DAEMON_ENV) {
        Some(path) => PathBuf::from(path),
        None => quickbus_daemon_path(),
    }
}

/// The workspace's `quickbus-daemon`, up to date: under `cargo test`, the
/// first call in a test process runs `cargo build -p quickbus-daemon` with
/// the test's own profile and target directory and returns the binary
/// cargo reports, so no test runs against a missing or stale daemon
/// (`cargo test -p quickbus-client` on a clean target builds it too).
/// Outside cargo (a test binary run by hand), the built binary next to the
/// test's target directory. Panics with the reason when there is none.
pub fn quickbus_daemon_path() -> PathBuf {
    static DAEMON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DAEMON
        .get_or_init(|| match std::env::var_os("CARGO") {
            Some(cargo) => build_daemon(Path::new(&cargo)),
            None => find_built_daemon(),
        })
        .clone()
        .unwrap_or_else(|why| panic!("{why}"))
}

/// `cargo build -p quickbus-daemon` in this test's profile; the path of
/// the executable cargo built (its JSON messages name it, wherever
/// `--target-dir` or `CARGO_TARGET_DIR` put it).
fn build_daemon(cargo: &Path) -> Result<PathBuf, String> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .args(["-p", DAEMON_NAME, "--bin", DAEMON_NAME])
        .args(["--message-format", "json-render-diagnostics"]);
    if let Some(dir) = target_dir_of_this_test() {
        command.arg("--target-dir").arg(dir);
    }
    if let Some(profile) = profile_of_this_test() {
        command.args(["--profile", &profile]);
    }
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cargo.display()))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo build -p {DAEMON_NAME}` failed ({}); set {DAEMON_ENV} to test another daemon",
            output.status
        ));
    }
    built_executable(&String::from_utf8_lossy(&output.stdout)).ok_or_else(|| {
        format!("`cargo build -p {DAEMON_NAME}` reported no {DAEMON_NAME} executable")
    })
}

/// The executable of the `quickbus-daemon` binary target among cargo's
/// JSON messages (one object per line).
fn built_executable(messages: &str) -> Option<PathBuf> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == DAEMON_NAME)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
}

/// The directory of this test binary's profile: test binaries live in
/// `<target>/<profile>/deps/`.
fn profile_dir_of_this_test() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    if deps.file_name()? != "deps" {
        return None;
    }
    deps.parent().map(Path::to_owned)
}

/// The profile this test was built in: `debug` is cargo's `dev`.
fn profile_of_this_test() -> Option<String> {
    let dir = profile_dir_of_this_test()?;
    let name = dir.file_name()?.to_str()?;
    Some(if name == "debug" { "dev" } else { name }.to_owned())
}

/// The target directory this test was built in (a cross build's
/// `<target>/<triple>/<profile>` is left to cargo's defaults).
fn target_dir_of_this_test() -> Option<PathBuf> {
    let target = profile_dir_of_this_test()?.parent()?.to_owned();
    target.join("CACHEDIR.TAG").is_file().then_some(target)
}

/// Outside cargo: a daemon already built next to this test's target
/// directory, or the workspace's `target/debug`.
fn find_built_daemon() -> Result<PathBuf, String> {
    let candidates = daemon_candidates();
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "no {DAEMON_NAME} binary found (looked at {candidates:?}); \
                 run the tests with cargo, or `cargo build -p {DAEMON_NAME}` first, or set {DAEMON_ENV}"
            )
        })
}

/// Whether the daemon under test is quickbus (and not the reference
/// dbus-daemon). Tests choose their assertions with it; a test of a
/// promise only quickbus makes starts with [`crate::skip::quickbus_only`]
/// instead, so that it is skipped visibly (or fails) against the reference.
pub fn testing_quickbus() -> bool {
    match std::env::var_os(DAEMON_ENV) {
        Some(path) => Path::new(&path)
            .file_name()
            .is_some_and(|name| name.to_string_lossy().contains("quickbus")),
        None => true,
    }
}

fn daemon_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(profile_dir) = profile_dir_of_this_test() {
        candidates.push(profile_dir.join(DAEMON_NAME));
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

/// A helper script from `tests/e2e/python/`, as a copy every user can
/// read (tests run it as other users, and the checkout may be private:
/// see [`crate::shared_copy`]).
pub fn python_script(name: &str) -> PathBuf {
    crate::shared_copy(&python_script_in_checkout(name))
}

fn python_script_in_checkout(name: &str) -> PathBuf {
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
        // Open to other users whatever the umask: tests run clients, and
        // daemons that dropped to their <user>, that must reach the
        // sockets and read the files in it.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|err| panic!("chmod 755 {}: {err}", path.display()));
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
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        std::fs::write(path.join("file"), "x").unwrap();
        drop(first);
        assert!(!path.exists());
    }

    #[test]
    fn the_built_daemon_is_the_executable_cargo_reports() {
        let messages = [
            r#"{"reason":"compiler-artifact","target":{"name":"quickbus_bus"},"executable":null}"#,
            "not json",
            r#"{"reason":"compiler-artifact","target":{"name":"quickbus-daemon"},"executable":"/t/debug/quickbus-daemon"}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        assert_eq!(
            built_executable(&messages),
            Some(PathBuf::from("/t/debug/quickbus-daemon"))
        );
        assert_eq!(built_executable(r#"{"reason":"build-finished"}"#), None);
    }

    #[test]
    fn under_cargo_the_daemon_is_built_and_exists() {
        if std::env::var_os("CARGO").is_none() {
            panic!("run this test with cargo test (it checks the build cargo runs)");
        }
        let daemon = quickbus_daemon_path();
        assert!(daemon.is_file(), "{}", daemon.display());
        assert_eq!(daemon.file_name().unwrap(), DAEMON_NAME);
    }

    #[test]
    fn the_daemon_is_looked_for_next_to_the_test_binary_first() {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap();
        assert_eq!(daemon_candidates()[0], profile_dir.join(DAEMON_NAME));
    }

    #[test]
    fn the_peer_script_exists() {
        assert!(python_script_in_checkout("peer.py").is_file());
    }

    #[test]
    fn the_python_scripts_are_copies_outside_the_checkout() {
        let script = python_script("peer.py");
        assert!(!script.starts_with(env!("CARGO_MANIFEST_DIR")));
        assert_eq!(
            std::fs::read(&script).unwrap(),
            std::fs::read(python_script_in_checkout("peer.py")).unwrap()
        );
    }
}
