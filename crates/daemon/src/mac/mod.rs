//! Mandatory access control: what the Linux security modules (AppArmor,
//! SELinux) have to say about this bus, decided at start as dbus-daemon
//! decides it (`bus_apparmor_full_init`, `bus_selinux_full_init`), and the
//! mediators the bus core asks about names and messages.

pub mod apparmor;
mod libselinux;
pub mod selinux;

use std::io;
use std::sync::OnceLock;

use quickbus_bus::mac::{Mediator, Stack};
use tracing::{info, warn};

use crate::config::BusConfig;

/// The bus's own AppArmor confinement, once AppArmor mediation started
/// (the mode is fixed at start: a reload never changes it).
static APPARMOR: OnceLock<apparmor::query::Confinement> = OnceLock::new();

/// Apply the configuration's `<apparmor>` to what this kernel offers and,
/// where SELinux is enabled, open its access vector cache; an error is
/// the reason the bus must not start. Called once, after the sockets are
/// bound and the user changed (dbus-daemon's order); a reload never calls
/// it again, so the AppArmor mode stays what it was at start. The
/// mediators themselves come from [`mediator`].
pub fn start(config: &BusConfig) -> io::Result<()> {
    let mode = apparmor::Mode::from_config(config.apparmor.as_deref());
    let support = apparmor::detect();
    match apparmor::decide(mode, support) {
        Ok(apparmor::Decision::Off) => {}
        Ok(apparmor::Decision::Mediate) => {
            let own = apparmor::own_confinement()?;
            let _ = APPARMOR.set(own);
            info!("AppArmor D-Bus mediation is enabled");
            warn!("{}", apparmor::UNTESTED_WARNING);
        }
        Err(reason) => return Err(io::Error::other(reason)),
    }
    if !crate::bus_identity::selinux_enabled() || !libselinux::Avc::selinux_enabled() {
        return Ok(());
    }
    libselinux::Avc::get().map_err(io::Error::other)?;
    info!("SELinux support is enabled");
    Ok(())
}

/// The mediators for `config` (SELinux's `<associate>` list), at start and
/// on every reload, for the modules [`start`] enabled; None when none is.
/// The service files' `AssumedAppArmorLabel=`s are the bus core's
/// (`BusOptions::assumed_apparmor_labels`), handed over with each check.
pub fn mediator(config: &BusConfig) -> Result<Option<Box<dyn Mediator>>, String> {
    let mut mediators: Vec<Box<dyn Mediator>> = Vec::new();
    if let Some(avc) = libselinux::Avc::opened() {
        let own = crate::bus_identity::own_security_label()
            .ok_or("Error getting context of bus: /proc/self/attr/current is unreadable")?;
        let selinux = selinux::SelinuxMediator::new(avc, &own, &config.selinux_associations)?;
        mediators.push(Box::new(selinux));
    }
    if let Some(own) = APPARMOR.get() {
        let aa = apparmor::mediator(config.bus_type.clone(), own.clone());
        mediators.push(Box::new(aa));
    }
    Ok(match mediators.len() {
        0 => None,
        1 => mediators.pop(),
        _ => Some(Box::new(Stack(mediators))),
    })
}
