//! Mandatory access control at start: `<apparmor mode=…>` on a machine
//! whose kernel has no AppArmor D-Bus mediation (this one, and Debian's
//! kernels), decided as dbus-daemon decides it.

use std::process::Command;

use quickbus_e2e::{daemon_path, run_bounded, write_config_with, Bus, Finished, Listen, TempDir};

/// These tests are about a kernel without AppArmor D-Bus mediation; on one
/// with it they would prove nothing, so they say so instead of passing.
fn assert_no_apparmor_dbus_mediation() {
    let mask = "/sys/kernel/security/apparmor/features/dbus/mask";
    if let Ok(text) = std::fs::read_to_string(mask) {
        panic!("this kernel offers AppArmor D-Bus mediation ({mask}: {text:?}): these tests need one without");
    }
}

fn start_with_apparmor(mode: &str) -> (TempDir, Finished) {
    let dir = TempDir::new();
    let config = write_config_with(
        dir.path(),
        Listen::UnixPath,
        &format!(r#"<apparmor mode="{mode}"/>"#),
    );
    let out = run_bounded(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork"),
    );
    (dir, out)
}

fn list_names(bus: &Bus) {
    bus.run(
        "dbus-send",
        &[
            "--session",
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.ListNames",
        ],
    )
    .success();
}

#[test]
fn apparmor_required_without_dbus_mediation_refuses_to_start() {
    assert_no_apparmor_dbus_mediation();
    let (_dir, out) = start_with_apparmor("required");
    assert_eq!(out.status.code(), Some(1), "{out:#?}");
    assert!(
        out.stderr
            .contains("Failed to start message bus: AppArmor mediation required but not present"),
        "{out:#?}"
    );
}

#[test]
fn apparmor_enabled_or_disabled_without_dbus_mediation_serves() {
    assert_no_apparmor_dbus_mediation();
    for mode in ["enabled", "disabled"] {
        let bus =
            Bus::start_with_config(Listen::UnixPath, &format!(r#"<apparmor mode="{mode}"/>"#));
        list_names(&bus);
        assert!(bus.stop().success(), "mode {mode}");
    }
}

#[test]
fn the_apparmor_mode_is_fixed_at_start_a_reload_to_required_keeps_serving() {
    assert_no_apparmor_dbus_mediation();
    let bus = Bus::start_with_config(Listen::UnixPath, r#"<apparmor mode="enabled"/>"#);
    let rewritten = write_config_with(
        bus.dir(),
        Listen::UnixPath,
        r#"<apparmor mode="required"/>"#,
    );
    assert!(std::fs::read_to_string(rewritten)
        .unwrap()
        .contains("required"));
    bus.reload_config();
    list_names(&bus);
    assert!(bus.stop().success());
}
