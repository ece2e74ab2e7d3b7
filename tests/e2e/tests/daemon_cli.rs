//! The daemon's command line: flags, configuration errors, addresses and
//! clean termination.

use std::process::Command;

use quickbus_e2e::{daemon_path, run_bounded, write_config, Background, Bus, Listen, TempDir};

#[test]
fn version_exits_zero_and_prints_a_version_number() {
    let out = run_bounded(Command::new(daemon_path()).arg("--version")).success();
    let has_version = out.stdout.split_whitespace().any(|word| {
        let parts: Vec<&str> = word.split('.').collect();
        parts.len() >= 2
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    });
    assert!(has_version, "no x.y version number: {out:#?}");
}

#[test]
fn an_unknown_flag_fails_with_a_message_on_stderr() {
    let out = run_bounded(Command::new(daemon_path()).arg("--no-such-flag")).failure();
    assert!(!out.stderr.trim().is_empty(), "{out:#?}");
}

#[test]
fn a_config_file_with_an_xml_error_is_refused_naming_the_file() {
    let dir = TempDir::new();
    let config = dir.path().join("broken-config.conf");
    std::fs::write(
        &config,
        "<busconfig>\n  <type>session</type>\n  <listen>unix:tmpdir=/tmp</listen\n</busconfig>\n",
    )
    .expect("write config");
    let out = run_bounded(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg("--print-address"),
    )
    .failure();
    assert!(out.stderr.contains("broken-config.conf"), "{out:#?}");
    assert!(
        out.stdout.is_empty(),
        "no address for a refused config: {out:#?}"
    );
}

#[test]
fn a_missing_config_file_is_refused_naming_the_file() {
    let dir = TempDir::new();
    let config = dir.path().join("absent.conf");
    let out = run_bounded(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork"),
    )
    .failure();
    assert!(out.stderr.contains("absent.conf"), "{out:#?}");
}

/// An `<auth>` mechanism the bus does not implement stops it from
/// starting, in dbus-daemon's words, rather than being left out.
#[test]
fn an_unsupported_auth_mechanism_is_refused_at_start() {
    let dir = TempDir::new();
    let config =
        quickbus_e2e::write_config_with(dir.path(), Listen::UnixPath, "<auth>KERBEROS_V4</auth>");
    let out = run_bounded(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"]),
    )
    .failure();
    assert!(
        out.stderr.contains(
            "Failed to start message bus: Unsupported auth mechanism \"KERBEROS_V4\" in bus \
             config file detected. Supported mechanisms are \"EXTERNAL, DBUS_COOKIE_SHA1, \
             ANONYMOUS\"."
        ),
        "{out:#?}"
    );
    assert!(out.stdout.is_empty(), "{out:#?}");
}

/// `--address=systemd:` (as the system bus's unit passes it) with no
/// socket from systemd: dbus-daemon's words, nothing printed.
#[test]
fn a_systemd_address_without_sockets_is_refused() {
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let out = run_bounded(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .args(["--address=systemd:", "--nofork", "--print-address"])
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID"),
    )
    .failure();
    assert!(
        out.stderr
            .contains("Failed to start message bus: No socket received."),
        "{out:#?}"
    );
    assert!(out.stdout.is_empty(), "{out:#?}");
}

#[test]
fn print_address_without_a_descriptor_prints_to_stdout() {
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let mut daemon = Background::spawn(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg("--print-address"),
    );
    let address = daemon.read_line();
    let expected_start = format!("unix:path={},", dir.path().join("bus").display());
    assert!(address.starts_with(&expected_start), "{address}");
    quickbus_e2e::assert_guid_suffix(&address);
}

#[test]
fn sigterm_ends_the_daemon_with_status_zero() {
    let bus = Bus::start();
    let _peer = bus.peer(); // with a client connected
    let status = bus.stop();
    assert!(status.success(), "{status}");
}

#[test]
fn listening_on_unix_tmpdir_serves_clients() {
    let bus = Bus::start_with(Listen::UnixTmpdir);
    assert!(bus.address().starts_with("unix:"), "{}", bus.address());
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
fn a_unix_path_socket_is_created_where_the_config_says() {
    let bus = Bus::start();
    let socket = bus.dir().join("bus");
    let kind = std::fs::metadata(&socket)
        .map(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
    assert!(
        matches!(kind, Ok(true)),
        "{} is not a socket",
        socket.display()
    );
}

#[test]
fn print_pid_and_address_go_to_stdout_address_first() {
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let mut daemon = Background::spawn(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg("--print-pid")
            .arg("--print-address"),
    );
    quickbus_e2e::assert_guid_suffix(&daemon.read_line());
    assert_eq!(daemon.read_line(), daemon.pid().to_string());
}

#[test]
fn address_flag_overrides_the_configured_listen_address() {
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let socket = dir.path().join("from-command-line");
    let mut daemon = Background::spawn(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg(format!("--address=unix:path={}", socket.display()))
            .arg("--print-address"),
    );
    let address = daemon.read_line();
    let expected_start = format!("unix:path={},", socket.display());
    assert!(address.starts_with(&expected_start), "{address}");
    let mut ping = Command::new("dbus-send");
    ping.env("DBUS_SESSION_BUS_ADDRESS", &address).args([
        "--session",
        "--print-reply",
        "--dest=org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus.Peer.Ping",
    ]);
    run_bounded(&mut ping).success();
}

#[test]
fn introspect_flag_prints_the_driver_interface_and_exits() {
    let out = run_bounded(Command::new(daemon_path()).arg("--introspect")).success();
    assert!(
        out.stdout
            .contains(r#"<interface name="org.freedesktop.DBus">"#),
        "{out:#?}"
    );
}
