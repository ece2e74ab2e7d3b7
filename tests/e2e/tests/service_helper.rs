//! Activation on a system bus without systemd: `<servicehelper>`, run as
//! dbus-daemon runs dbus-daemon-launch-helper (`HELPER NAME`, the bus
//! address in the environment, its exit codes mapped to Spawn.* errors),
//! with the real Debian helper and with a fake one; and services the
//! daemon starts itself with `User=` get that user's supplementary groups.
//!
//! The services run as `nobody`, given an extra group that only
//! libnss-extrausers knows, enabled for the daemon (and so the helper and
//! the service) alone in a mount namespace. The tests run as root.

use std::path::{Path, PathBuf};
use std::process::Command;

use quickbus_e2e::namespace::{start_namespaced, write_extrausers, NSS_MOUNTS};
use quickbus_e2e::{
    python_path, python_script, run_bounded, skip, testing_quickbus, write_config_with, Bus,
    Finished, Listen, TempDir,
};

const HELPER: &str = "/usr/lib/dbus-1.0/dbus-daemon-launch-helper";
const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;
/// A group whose member list names nobody, known to extrausers only.
const EXTRA_GID: u32 = 4345;

const PATH: &str = "/org/example/Activated";
const IFACE: &str = "org.example.Activated";

fn service_file(dir: &Path, name: &str, exec: &str, user: Option<&str>) {
    let user = user.map(|u| format!("User={u}\n")).unwrap_or_default();
    std::fs::write(
        dir.join(format!("{name}.service")),
        format!("[D-BUS Service]\nName={name}\nExec={exec}\n{user}"),
    )
    .unwrap();
}

/// python/activated.py as the service for `name`.
fn python_exec(name: &str) -> String {
    format!(
        "{} {} {name}",
        python_path().display(),
        python_script("activated.py").display()
    )
}

/// `dbus-send --print-reply` to `address`.
fn send(address: &str, args: &[&str]) -> Finished {
    run_bounded(
        Command::new("dbus-send")
            .env("DBUS_SESSION_BUS_ADDRESS", address)
            .arg("--session")
            .arg("--print-reply")
            .args(args),
    )
}

fn call(address: &str, name: &str, method: &str) -> Finished {
    send(
        address,
        &[
            &format!("--dest={name}"),
            PATH,
            &format!("{IFACE}.{method}"),
        ],
    )
}

/// The uint32s of a dbus-send reply.
fn numbers(reply: &Finished) -> Vec<u32> {
    reply
        .stdout
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "uint32")
        .map(|w| w[1].parse().unwrap())
        .collect()
}

/// Files for a mount namespace in which NSS also reads `dir/extrausers`,
/// where nobody is a member of group EXTRA_GID.
fn write_nss_files(dir: &Path) {
    write_extrausers(dir, "", &format!("qbextra:x:{EXTRA_GID}:nobody\n"));
}

const ALLOW_ALL: &str = r#"<policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>"#;

#[test]
fn the_debian_launch_helper_starts_a_service_as_its_user_with_its_groups() {
    assert!(
        Path::new(HELPER).exists(),
        "{HELPER} is missing: install dbus-daemon"
    );
    let dir = TempDir::new();
    write_nss_files(dir.path());
    // The helper reads the system configuration and service directories
    // itself and starts the service on the standard system bus address: the
    // namespace puts our files and our socket there.
    let services = dir.path().join("system-services");
    let run_dbus = dir.path().join("run-dbus");
    for d in [&services, &run_dbus] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    service_file(
        &services,
        "org.example.Helped",
        &python_exec("org.example.Helped"),
        Some("nobody"),
    );
    let config = dir.path().join("system.conf");
    std::fs::write(
        &config,
        format!(
            r#"<busconfig>
  <type>system</type>
  <user>messagebus</user>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <servicehelper>{HELPER}</servicehelper>
  <standard_system_servicedirs/>
  {ALLOW_ALL}
</busconfig>
"#
        ),
    )
    .unwrap();
    let mounts = format!(
        r#"{NSS_MOUNTS}
mount --bind "$0/system-services" /usr/share/dbus-1/system-services
mount -t tmpfs tmpfs /run
mkdir /run/dbus
mount --bind "$0/run-dbus" /run/dbus"#
    );
    let bus = start_namespaced(dir, &mounts, &config);
    // Outside the namespace the socket is in our directory.
    let address = format!(
        "unix:path={}",
        bus.dir().join("run-dbus/system_bus_socket").display()
    );
    let reply = call(&address, "org.example.Helped", "Identity");
    let reply = match reply.status.success() {
        true => reply,
        false => panic!("{reply:#?}; daemon: {}", bus.log()),
    };
    let ids = numbers(&reply);
    assert_eq!(
        ids,
        [NOBODY, NOGROUP, EXTRA_GID, NOGROUP],
        "uid, gid, groups of the started service"
    );
    let starter = call(&address, "org.example.Helped", "Starter").success();
    assert!(starter.stdout.contains("\"system\""), "{starter:#?}");
    call(&address, "org.example.Helped", "Exit");
}

#[test]
fn services_started_as_their_user_get_its_supplementary_groups() {
    // dbus-daemon only switches users through the helper.
    if skip::quickbus_only("switching a service's user without the helper") {
        return;
    }
    let dir = TempDir::new();
    write_nss_files(dir.path());
    let services = dir.path().join("services");
    std::fs::create_dir_all(&services).unwrap();
    service_file(
        &services,
        "org.example.AsNobody",
        &python_exec("org.example.AsNobody"),
        Some("nobody"),
    );
    // A system bus run by root (the socket in our directory: nobody must
    // reach it).
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let extra = format!(
        "<servicedir>{}</servicedir>\n  <type>system</type>",
        services.display()
    );
    let config = write_config_with(dir.path(), Listen::UnixPath, &extra);
    let bus = start_namespaced(dir, NSS_MOUNTS, &config);
    let reply = call(bus.address(), "org.example.AsNobody", "Identity");
    let reply = match reply.status.success() {
        true => reply,
        false => panic!("{reply:#?}; daemon: {}", bus.log()),
    };
    assert_eq!(numbers(&reply), [NOBODY, NOGROUP, EXTRA_GID, NOGROUP]);
    call(bus.address(), "org.example.AsNobody", "Exit");
}

/// A helper that records how it was run and exits with the status its
/// service name asks for (`org.example.ExitN`).
fn fake_helper(dir: &Path) -> PathBuf {
    let helper = dir.join("fake-helper");
    let log = dir.join("helper.log");
    quickbus_e2e::write_executable(
        &helper,
        &format!(
            "#!/bin/sh\necho \"$# $1 $DBUS_STARTER_BUS_TYPE $DBUS_STARTER_ADDRESS ${{SYSTEMD_NSS_BYPASS_BUS-unset}}\" >> {}\nexit \"${{1#org.example.Exit}}\"\n",
            log.display()
        ),
    );
    helper
}

#[test]
fn the_helpers_exit_codes_become_dbus_daemons_errors() {
    let dir = TempDir::new();
    let helper = fake_helper(dir.path());
    let services = dir.path().join("services");
    std::fs::create_dir_all(&services).unwrap();
    let codes = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 42];
    for code in codes {
        let name = format!("org.example.Exit{code}");
        service_file(&services, &name, "/bin/false", Some("nobody"));
    }
    service_file(&services, "org.example.NoUser", "/bin/false", None);
    let extra = format!(
        "<servicedir>{}</servicedir>\n  <servicehelper>{}</servicehelper>",
        services.display(),
        helper.display()
    );
    let log = dir.path().join("helper.log");
    let bus = Bus::start_configured(|d| write_config_with(d, Listen::UnixPath, &extra));
    let expected = [
        (
            1,
            "Spawn.ChildExited",
            "Launch helper exited with unknown return code 1",
        ),
        (2, "NoMemory", "Launcher could not run (out of memory)"),
        (
            3,
            "Spawn.ConfigInvalid",
            "Invalid configuration (missing or empty <user>?)",
        ),
        (
            4,
            "Spawn.FailedToSetup",
            "Failed to setup environment correctly",
        ),
        (
            5,
            "Spawn.ServiceNotValid",
            "Bus name is not valid or missing",
        ),
        (
            6,
            "Spawn.ServiceNotFound",
            "Bus name not found in system service directory",
        ),
        (
            7,
            "Spawn.PermissionsInvalid",
            "The permission of the setuid helper is not correct",
        ),
        (
            8,
            "Spawn.PermissionsInvalid",
            "The service file is incorrect or does not have all required attributes",
        ),
        (
            9,
            "Spawn.ExecFailed",
            "Cannot launch daemon, file not found or permissions invalid",
        ),
        (10, "InvalidArgs", "Invalid arguments to command line"),
        (
            11,
            "Spawn.ChildSignaled",
            "Launched child was signaled, it probably crashed",
        ),
        (
            42,
            "Spawn.ChildExited",
            "Launch helper exited with unknown return code 42",
        ),
    ];
    for (code, error, text) in expected {
        let name = format!("org.example.Exit{code}");
        let failed = call(bus.address(), &name, "Echo").failure();
        let want = format!("Error org.freedesktop.DBus.Error.{error}: {text}");
        assert!(failed.stderr.contains(&want), "{code}: {failed:#?}");
    }
    // Run as `HELPER NAME`, with the bus address in the environment (and
    // without the daemon's own SYSTEMD_NSS_BYPASS_BUS, on quickbus).
    let runs = std::fs::read_to_string(&log).unwrap();
    let first = format!("1 org.example.Exit1 session {}", bus.address());
    let first = if testing_quickbus() {
        format!("{first} unset")
    } else {
        first
    };
    assert!(runs.lines().any(|l| l.starts_with(&first)), "{runs}");
    // A service without User= is refused before any helper runs.
    let failed = call(bus.address(), "org.example.NoUser", "Echo").failure();
    assert!(
        failed
            .stderr
            .contains("Error org.freedesktop.DBus.Error.Spawn.FileInvalid: Cannot do system-bus activation with no user"),
        "{failed:#?}"
    );
    assert!(!std::fs::read_to_string(&log).unwrap().contains("NoUser"));
}
