//! Mandatory access control: what the Linux security modules (AppArmor,
//! SELinux) have to say about this bus, decided at start as dbus-daemon
//! decides it (`bus_apparmor_full_init`, `bus_selinux_full_init`).

pub mod apparmor;

use std::io;

use tracing::warn;

use crate::config::BusConfig;

/// Apply the configuration's `<apparmor>` to what this kernel offers; an
/// error is the reason the bus must not start. Called once, after the
/// sockets are bound and the user changed (dbus-daemon's order); a reload
/// never calls it again, so the mode stays what it was at start.
pub fn start(config: &BusConfig) -> io::Result<()> {
    let mode = apparmor::Mode::from_config(config.apparmor.as_deref());
    let support = apparmor::detect();
    match apparmor::decide(mode, support) {
        Ok(None) => {}
        Ok(Some(warning)) => warn!("{warning}"),
        Err(reason) => return Err(io::Error::other(reason)),
    }
    Ok(())
}
