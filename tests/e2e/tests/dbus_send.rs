//! dbus-send (libdbus) against the bus driver and a dbus-python peer.

use quickbus_e2e::Bus;

const DRIVER: [&str; 2] = ["--dest=org.freedesktop.DBus", "/org/freedesktop/DBus"];

/// `dbus-send --session --print-reply --dest=org.freedesktop.DBus
/// /org/freedesktop/DBus <member> <args...>`
fn call_driver(bus: &Bus, member: &str, args: &[&str]) -> quickbus_e2e::Finished {
    let mut argv = vec!["--session", "--print-reply", DRIVER[0], DRIVER[1], member];
    argv.extend_from_slice(args);
    bus.run("dbus-send", &argv)
}

#[test]
fn list_names_shows_the_driver_and_connected_peers() {
    let bus = Bus::start();
    let peer = bus.peer();
    let out = call_driver(&bus, "org.freedesktop.DBus.ListNames", &[]).success();
    assert!(
        out.stdout.contains(r#"string "org.freedesktop.DBus""#),
        "{out:#?}"
    );
    let peer_entry = format!(r#"string "{}""#, peer.unique_name());
    assert!(out.stdout.contains(&peer_entry), "{out:#?}");
}

/// The 32 hex digits of a `string "<id>"` line of dbus-send's output.
fn printed_id(stdout: &str) -> String {
    let id = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("string \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no string in {stdout:?}"));
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "bus id {id:?} is not 32 hex digits"
    );
    id.to_owned()
}

#[test]
fn get_id_returns_the_same_32_hex_digit_id_every_time() {
    // dbus-daemon's bus id differs from the guid in its address, so only
    // the form and the stability are checked.
    let bus = Bus::start();
    let first = call_driver(&bus, "org.freedesktop.DBus.GetId", &[]).success();
    let second = call_driver(&bus, "org.freedesktop.DBus.GetId", &[]).success();
    assert_eq!(printed_id(&first.stdout), printed_id(&second.stdout));
}

#[test]
fn get_name_owner_of_an_unknown_name_is_name_has_no_owner() {
    let bus = Bus::start();
    let out = call_driver(
        &bus,
        "org.freedesktop.DBus.GetNameOwner",
        &["string:com.example.Nobody"],
    )
    .failure();
    assert!(
        out.stderr
            .contains("org.freedesktop.DBus.Error.NameHasNoOwner"),
        "{out:#?}"
    );
}

#[test]
fn get_name_owner_of_an_owned_name_is_its_unique_name() {
    let bus = Bus::start();
    let mut peer = bus.peer();
    assert_eq!(peer.request_name("com.example.Owned", 0), 1);
    let out = call_driver(
        &bus,
        "org.freedesktop.DBus.GetNameOwner",
        &["string:com.example.Owned"],
    )
    .success();
    let expected = format!(r#"string "{}""#, peer.unique_name());
    assert!(out.stdout.contains(&expected), "{out:#?}");
}

#[test]
fn a_call_to_an_unknown_destination_is_service_unknown() {
    let bus = Bus::start();
    let out = bus
        .run(
            "dbus-send",
            &[
                "--session",
                "--print-reply",
                "--dest=com.example.Nobody",
                "/com/example/Nobody",
                "com.example.Nobody.Hello",
            ],
        )
        .failure();
    assert!(
        out.stderr
            .contains("org.freedesktop.DBus.Error.ServiceUnknown"),
        "{out:#?}"
    );
}

#[test]
fn introspect_describes_the_driver_interface() {
    let bus = Bus::start();
    let out = call_driver(&bus, "org.freedesktop.DBus.Introspectable.Introspect", &[]).success();
    for expected in [
        r#"<interface name="org.freedesktop.DBus">"#,
        r#"<method name="RequestName">"#,
        r#"<signal name="NameOwnerChanged">"#,
        r#"<interface name="org.freedesktop.DBus.Introspectable">"#,
    ] {
        assert!(
            out.stdout.contains(expected),
            "missing {expected}: {out:#?}"
        );
    }
}

#[test]
fn peer_ping_is_answered_by_the_driver_and_by_a_peer() {
    let bus = Bus::start();
    let peer = bus.peer();
    let out = call_driver(&bus, "org.freedesktop.DBus.Peer.Ping", &[]).success();
    assert!(out.stdout.starts_with("method return"), "{out:#?}");
    // libdbus answers Peer.Ping itself: this checks routing to a unique name.
    let dest = format!("--dest={}", peer.unique_name());
    let out = bus
        .run(
            "dbus-send",
            &[
                "--session",
                "--print-reply",
                &dest,
                "/",
                "org.freedesktop.DBus.Peer.Ping",
            ],
        )
        .success();
    let sender = format!("sender={}", peer.unique_name());
    assert!(out.stdout.contains(&sender), "{out:#?}");
}

#[test]
fn connection_unix_user_and_process_id_of_a_peer() {
    let bus = Bus::start();
    let peer = bus.peer();
    let name = format!("string:{}", peer.unique_name());
    let out = call_driver(&bus, "org.freedesktop.DBus.GetConnectionUnixUser", &[&name]).success();
    let uid = rustix::process::getuid().as_raw();
    assert!(out.stdout.contains(&format!("uint32 {uid}\n")), "{out:#?}");
    let out = call_driver(
        &bus,
        "org.freedesktop.DBus.GetConnectionUnixProcessID",
        &[&name],
    )
    .success();
    let pid = peer.pid();
    assert!(out.stdout.contains(&format!("uint32 {pid}\n")), "{out:#?}");
}

#[test]
fn connection_unix_user_of_an_unknown_name_is_name_has_no_owner() {
    let bus = Bus::start();
    let out = call_driver(
        &bus,
        "org.freedesktop.DBus.GetConnectionUnixUser",
        &["string:com.example.Nobody"],
    )
    .failure();
    assert!(
        out.stderr
            .contains("org.freedesktop.DBus.Error.NameHasNoOwner"),
        "{out:#?}"
    );
}

#[test]
fn a_method_call_reaches_a_python_service_and_returns() {
    let bus = Bus::start();
    let mut service = bus.peer();
    service.serve("/com/example/Test");
    assert_eq!(service.request_name("com.example.Service", 0), 1);
    let out = bus
        .run(
            "dbus-send",
            &[
                "--session",
                "--print-reply",
                "--dest=com.example.Service",
                "/com/example/Test",
                "com.example.Test.Echo",
                "string:from dbus-send",
            ],
        )
        .success();
    assert!(
        out.stdout.contains(r#"string "from dbus-send""#),
        "{out:#?}"
    );
}

#[test]
fn a_signal_reaches_a_python_receiver_with_a_match_rule() {
    let bus = Bus::start();
    let mut receiver = bus.peer();
    receiver.add_match("type='signal',interface='com.example.Sent',arg0='yes'");
    for arg in ["no", "yes"] {
        bus.run(
            "dbus-send",
            &[
                "--session",
                "--type=signal",
                "/com/example/Sent",
                "com.example.Sent.Signal",
                &format!("string:{arg}"),
            ],
        )
        .success();
    }
    let event = receiver.wait_event(|e| e.starts_with("signal com.example.Sent.Signal "));
    assert!(event.ends_with(r#"args=["yes"]"#), "{event}");
    assert!(event.contains(" path=/com/example/Sent "), "{event}");
}
