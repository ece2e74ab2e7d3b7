//! AppArmor: `<apparmor mode="disabled|enabled|required"/>` decided at
//! start as dbus-daemon's `bus_apparmor_pre_init` and
//! `bus_apparmor_full_init` decide it.
//!
//! The mode is read once, from the configuration the daemon starts with: a
//! reload parses `<apparmor>` again (so a bad value is still refused) but
//! changes nothing, as in dbus-daemon, whose full init runs only at start.
//!
//! Where the kernel offers D-Bus mediation, `enabled` and `required` ask
//! it about every decision ([`mediator`], with the query format in
//! [`query`]). That path has been tested against the kernel interface's
//! documented format only, never against a kernel that mediates D-Bus
//! (see docs/mandatory-access-control.md), so the daemon says so at start.

pub mod mediator;
pub mod query;

use std::io;
use std::path::{Path, PathBuf};

use self::mediator::{AccessFile, AppArmorMediator};
use self::query::Confinement;

/// `<apparmor mode=…>`; dbus-daemon's default, without the element, is
/// `enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    Disabled,
    #[default]
    Enabled,
    Required,
}

impl Mode {
    /// The configuration's value (the loader has already refused anything
    /// else, with dbus-daemon's message).
    pub fn from_config(value: Option<&str>) -> Mode {
        match value {
            Some("disabled") => Mode::Disabled,
            Some("required") => Mode::Required,
            _ => Mode::Enabled,
        }
    }
}

/// What the running kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// AppArmor is off, or on without D-Bus mediation (Debian's kernels).
    Absent,
    /// AppArmor is on and its `features/dbus/mask` lists acquire, send and
    /// receive (Ubuntu's kernels, mainline from 6.17).
    DbusMediation,
}

/// dbus-daemon's text, which `startup` prefixes with
/// "Failed to start message bus: ".
pub const REQUIRED_BUT_ABSENT: &str = "AppArmor mediation required but not present";

/// The warning at start when the bus mediates: the query path follows the
/// documented kernel interface but has not been seen working on a kernel
/// that mediates D-Bus.
pub const UNTESTED_WARNING: &str = "AppArmor D-Bus mediation is enabled: quickbus asks this kernel's AppArmor policy about every message as dbus-daemon does, but this path has not yet been seen working on a real kernel (see docs/mandatory-access-control.md)";

/// The decision at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to ask.
    Off,
    /// Ask the kernel about every decision (and log [`UNTESTED_WARNING`]).
    Mediate,
}

/// The decision at start, or the reason the bus must not start.
pub fn decide(mode: Mode, support: Support) -> Result<Decision, &'static str> {
    match (mode, support) {
        (Mode::Disabled, _) | (Mode::Enabled, Support::Absent) => Ok(Decision::Off),
        (Mode::Required, Support::Absent) => Err(REQUIRED_BUT_ABSENT),
        (Mode::Enabled | Mode::Required, Support::DbusMediation) => Ok(Decision::Mediate),
    }
}

/// The bus's own confinement, as libapparmor's `aa_getcon` reads it
/// (AppArmor's own attribute directory first, for stacked modules).
pub fn own_confinement() -> io::Result<Confinement> {
    let raw = std::fs::read("/proc/self/attr/apparmor/current")
        .or_else(|_| std::fs::read("/proc/self/attr/current"))
        .map_err(|e| {
            io::Error::other(format!(
                "Error getting AppArmor context of bus: {}",
                nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)).desc()
            ))
        })?;
    Ok(Confinement::parse(&raw))
}

/// The mediator asking this kernel (its `.access` file in the first
/// securityfs mount), for a bus of `bus_type` running as `own`. The
/// service files' `AssumedAppArmorLabel=`s come with each activation check
/// (the bus keeps them, so a service file found by a rescan has its label).
pub fn mediator(bus_type: Option<String>, own: Confinement) -> AppArmorMediator {
    let mounts = securityfs_mounts();
    let access = mounts
        .iter()
        .map(|mount| mount.join("apparmor/.access"))
        .find(|access| access.exists())
        .unwrap_or_else(|| PathBuf::from("/sys/kernel/security/apparmor/.access"));
    AppArmorMediator::new(
        Box::new(AccessFile(access)),
        bus_type,
        own,
        mediator::audit_to_log(),
    )
}

/// Where the kernel tells whether the AppArmor module is on.
const MODULE_ENABLED: &str = "/sys/module/apparmor/parameters/enabled";

/// What this kernel offers, read as libapparmor's `aa_is_enabled` and
/// dbus-broker's `bus_apparmor_dbus_supported` read it.
pub fn detect() -> Support {
    detect_in(Path::new(MODULE_ENABLED), &securityfs_mounts())
}

fn detect_in(module_enabled: &Path, securityfs: &[PathBuf]) -> Support {
    let enabled = std::fs::read(module_enabled)
        .map(|v| v.first() == Some(&b'Y'))
        .unwrap_or(false);
    if !enabled {
        return Support::Absent;
    }
    // Read, not stat: AppArmor does not mediate stat in apparmorfs, and a
    // daemon confined too narrowly to read the mask (in a container) must
    // behave as if there were no AppArmor (dbus-daemon's reasoning).
    let offers_dbus = securityfs.iter().any(|mount| {
        read_mask(&mount.join("apparmor/features/dbus/mask"))
            .map(|mask| lists_dbus_permissions(&mask))
            .unwrap_or(false)
    });
    if offers_dbus {
        Support::DbusMediation
    } else {
        Support::Absent
    }
}

fn read_mask(path: &Path) -> io::Result<String> {
    std::fs::read_to_string(path)
}

/// The mask must name every permission the bus asks about.
fn lists_dbus_permissions(mask: &str) -> bool {
    let words: Vec<&str> = mask.split_whitespace().collect();
    ["acquire", "send", "receive"]
        .iter()
        .all(|p| words.contains(p))
}

/// Every securityfs mount point (libapparmor's `aa_find_mountpoint` looks
/// the same way), `/sys/kernel/security` when the table cannot be read.
fn securityfs_mounts() -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mounts") else {
        return vec![PathBuf::from("/sys/kernel/security")];
    };
    table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, at, kind) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "securityfs").then(|| PathBuf::from(unescape_mount_path(at)))
        })
        .collect()
}

/// /proc/self/mounts writes space, tab, newline and backslash as octal.
fn unescape_mount_path(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let octal = std::str::from_utf8(&bytes[i + 1..i + 4]).ok();
            if let Some(v) = octal.and_then(|o| u8::from_str_radix(o, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake sysfs and securityfs in a directory of its own.
    struct Fake(PathBuf);

    impl Drop for Fake {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl Fake {
        fn new(enabled: Option<&str>, mask: Option<&str>) -> Fake {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let dir =
                Fake(std::env::temp_dir().join(format!("qb-apparmor-{}-{n}", std::process::id())));
            std::fs::create_dir_all(&dir.0).unwrap();
            if let Some(v) = enabled {
                std::fs::write(dir.0.join("enabled"), v).unwrap();
            }
            if let Some(mask) = mask {
                let features = dir.0.join("security/apparmor/features/dbus");
                std::fs::create_dir_all(&features).unwrap();
                std::fs::write(features.join("mask"), mask).unwrap();
            }
            dir
        }

        fn detect(&self) -> Support {
            detect_in(&self.0.join("enabled"), &[self.0.join("security")])
        }
    }

    #[test]
    fn support_needs_apparmor_on_and_a_mask_with_acquire_send_receive() {
        let ubuntu = "acquire send receive\n";
        assert_eq!(
            Fake::new(Some("Y\n"), Some(ubuntu)).detect(),
            Support::DbusMediation
        );
        assert_eq!(
            Fake::new(Some("Y\n"), Some("send receive acquire eavesdrop")).detect(),
            Support::DbusMediation
        );
        // Debian: AppArmor on, no dbus features.
        assert_eq!(Fake::new(Some("Y\n"), None).detect(), Support::Absent);
        assert_eq!(
            Fake::new(Some("N\n"), Some(ubuntu)).detect(),
            Support::Absent
        );
        assert_eq!(Fake::new(None, Some(ubuntu)).detect(), Support::Absent);
        assert_eq!(
            Fake::new(Some("Y"), Some("send receive")).detect(),
            Support::Absent
        );
        assert_eq!(
            Fake::new(Some("Y"), Some("acquired sending receive")).detect(),
            Support::Absent
        );
    }

    #[test]
    fn the_decision_at_start_follows_dbus_daemon() {
        use Mode::*;
        use Support::*;
        assert_eq!(decide(Disabled, Absent), Ok(Decision::Off));
        assert_eq!(decide(Disabled, DbusMediation), Ok(Decision::Off));
        assert_eq!(decide(Enabled, Absent), Ok(Decision::Off));
        assert_eq!(decide(Required, Absent), Err(REQUIRED_BUT_ABSENT));
        assert_eq!(decide(Enabled, DbusMediation), Ok(Decision::Mediate));
        assert_eq!(decide(Required, DbusMediation), Ok(Decision::Mediate));
    }

    #[test]
    fn the_default_mode_is_enabled() {
        assert_eq!(Mode::from_config(None), Mode::Enabled);
        assert_eq!(Mode::from_config(Some("disabled")), Mode::Disabled);
        assert_eq!(Mode::from_config(Some("required")), Mode::Required);
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/a\\040b"), "/a b");
        assert_eq!(
            unescape_mount_path("/sys/kernel/security"),
            "/sys/kernel/security"
        );
    }
}
