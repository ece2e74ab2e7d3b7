//! Mandatory access control: what the Linux security modules (AppArmor,
//! SELinux) have to say about this bus, decided at start as dbus-daemon
//! decides it (`bus_apparmor_full_init`, `bus_selinux_full_init`), and the
//! mediators the bus core asks about names and messages.

pub mod apparmor;
mod libselinux;
pub mod selinux;

use std::collections::HashMap;
use std::io;
use std::sync::OnceLock;

use quickbus_bus::mac::{Mediator, Stack};
use tracing::{info, warn};

use crate::config::BusConfig;
use crate::service_file::ServiceFile;

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

/// The mediators for `config` (SELinux's `<associate>` list) and the
/// service files (`AssumedAppArmorLabel=`), at start and on every reload,
/// for the modules [`start`] enabled; None when none is.
pub fn mediator(
    config: &BusConfig,
    services: &[ServiceFile],
) -> Result<Option<Box<dyn Mediator>>, String> {
    let mut mediators: Vec<Box<dyn Mediator>> = Vec::new();
    if let Some(avc) = libselinux::Avc::opened() {
        let own = crate::bus_identity::own_security_label()
            .ok_or("Error getting context of bus: /proc/self/attr/current is unreadable")?;
        let selinux = selinux::SelinuxMediator::new(avc, &own, &config.selinux_associations)?;
        mediators.push(Box::new(selinux));
    }
    if let Some(own) = APPARMOR.get() {
        let aa = apparmor::mediator(
            config.bus_type.clone(),
            own.clone(),
            assumed_labels(services),
        );
        mediators.push(Box::new(aa));
    }
    Ok(match mediators.len() {
        0 => None,
        1 => mediators.pop(),
        _ => Some(Box::new(Stack(mediators))),
    })
}

/// Activatable name -> its `AssumedAppArmorLabel=`, for those that have one.
fn assumed_labels(services: &[ServiceFile]) -> HashMap<String, String> {
    services
        .iter()
        .filter_map(|s| Some((s.name.clone(), s.assumed_apparmor_label.clone()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_labels_come_from_the_service_files_that_name_one() {
        let file = |name: &str, label: Option<&str>| ServiceFile {
            path: format!("/x/{name}.service").into(),
            name: name.into(),
            exec: Some("/bin/true".into()),
            user: None,
            systemd_service: None,
            assumed_apparmor_label: label.map(String::from),
        };
        let labels = assumed_labels(&[
            file("org.example.A", Some("/usr/bin/a")),
            file("org.example.B", None),
        ]);
        assert_eq!(
            labels,
            HashMap::from([("org.example.A".to_owned(), "/usr/bin/a".to_owned())])
        );
    }
}
