//! Mandatory access control: what the Linux security modules (AppArmor,
//! SELinux) have to say about this bus, decided at start as dbus-daemon
//! decides it (`bus_apparmor_full_init`, `bus_selinux_full_init`), and the
//! SELinux mediator the bus core asks about names and messages.

pub mod apparmor;
mod libselinux;
pub mod selinux;

use std::io;

use quickbus_bus::mac::Mediator;
use tracing::{info, warn};

use crate::config::BusConfig;

/// Apply the configuration's `<apparmor>` to what this kernel offers and,
/// where SELinux is enabled, open its access vector cache; an error is
/// the reason the bus must not start. Called once, after the sockets are
/// bound and the user changed (dbus-daemon's order); a reload never calls
/// it again, so the AppArmor mode stays what it was at start. Returns the
/// mediator to install in the bus (None without SELinux).
pub fn start(config: &BusConfig) -> io::Result<Option<Box<dyn Mediator>>> {
    let mode = apparmor::Mode::from_config(config.apparmor.as_deref());
    let support = apparmor::detect();
    match apparmor::decide(mode, support) {
        Ok(None) => {}
        Ok(Some(warning)) => warn!("{warning}"),
        Err(reason) => return Err(io::Error::other(reason)),
    }
    if !crate::bus_identity::selinux_enabled() || !libselinux::Avc::selinux_enabled() {
        return Ok(None);
    }
    libselinux::Avc::get().map_err(io::Error::other)?;
    let mediator = mediator(config).map_err(io::Error::other)?;
    info!("SELinux support is enabled");
    Ok(mediator)
}

/// A new SELinux mediator for `config`'s `<associate>` list (at start and
/// on every reload), when SELinux mediation was started.
pub fn mediator(config: &BusConfig) -> Result<Option<Box<dyn Mediator>>, String> {
    let Some(avc) = libselinux::Avc::opened() else {
        return Ok(None);
    };
    let own = crate::bus_identity::own_security_label()
        .ok_or("Error getting context of bus: /proc/self/attr/current is unreadable")?;
    let mediator = selinux::SelinuxMediator::new(avc, &own, &config.selinux_associations)?;
    Ok(Some(Box::new(mediator)))
}
