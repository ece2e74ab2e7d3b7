//! A daemon in a mount namespace of its own, for tests that must change
//! what the daemon sees of the system (its NSS configuration, the system
//! bus's paths) without touching the machine: users that only
//! libnss-extrausers knows, enabled for the daemon alone.

use std::path::Path;
use std::process::Command;

use crate::{daemon_path, Bus, TempDir};

/// The mounts that make NSS also read the files [`write_extrausers`]
/// wrote (`$0` is the test's directory, as [`start_namespaced`] runs it).
pub const NSS_MOUNTS: &str = r#"mount --bind "$0/nsswitch.conf" /etc/nsswitch.conf
mount --bind "$0/extrausers" /var/lib/extrausers"#;

/// Writes `dir/extrausers/{passwd,group}` with these lines and
/// `dir/nsswitch.conf`: the machine's, with `extrausers` added to the
/// passwd and group lines. Mounted with [`NSS_MOUNTS`].
pub fn write_extrausers(dir: &Path, passwd: &str, group: &str) {
    assert!(
        Path::new("/var/lib/extrausers").is_dir(),
        "this test needs libnss-extrausers (see scripts/test.sh)"
    );
    let files = dir.join("extrausers");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("passwd"), passwd).unwrap();
    std::fs::write(files.join("group"), group).unwrap();
    let nsswitch = std::fs::read_to_string("/etc/nsswitch.conf").unwrap_or_default();
    let nsswitch: String = nsswitch
        .lines()
        .map(|line| {
            if line.starts_with("passwd:") || line.starts_with("group:") {
                format!("{line} extrausers\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    std::fs::write(dir.join("nsswitch.conf"), nsswitch).unwrap();
}

/// The daemon with `config`, in a mount namespace prepared by `mounts`
/// (shell lines; `$0` is `dir`).
pub fn start_namespaced(dir: TempDir, mounts: &str, config: &Path) -> Bus {
    let script = format!("set -e\n{mounts}\nexec \"$@\"");
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &script])
        .arg(dir.path())
        .arg(daemon_path());
    Bus::start_command(dir, cmd, &[format!("--config-file={}", config.display())])
}
