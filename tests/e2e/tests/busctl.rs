//! busctl --user (sd-bus) against the bus driver and a dbus-python service.

use quickbus_e2e::Bus;

/// Runs `busctl --user --no-pager <args>` and expects success.
fn busctl(bus: &Bus, args: &[&str]) -> quickbus_e2e::Finished {
    let mut argv = vec!["--user", "--no-pager"];
    argv.extend_from_slice(args);
    bus.run("busctl", &argv).success()
}

#[test]
fn list_shows_the_driver_and_a_named_peer_with_its_pid() {
    let bus = Bus::start();
    let mut peer = bus.peer();
    assert_eq!(peer.request_name("com.example.Listed", 0), 1);
    let out = busctl(&bus, &["list"]);
    let row = |name: &str| {
        out.stdout
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}: {out:#?}"))
            .to_owned()
    };
    row("org.freedesktop.DBus");
    let pid = peer.pid().to_string();
    for name in ["com.example.Listed", peer.unique_name()] {
        let columns: Vec<String> = row(name).split_whitespace().map(String::from).collect();
        assert_eq!(columns.get(1), Some(&pid), "pid column of {name}: {out:#?}");
    }
}

#[test]
fn call_get_id_returns_a_32_hex_digit_string() {
    let bus = Bus::start();
    let out = busctl(
        &bus,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetId",
        ],
    );
    let id = out
        .stdout
        .trim()
        .strip_prefix("s \"")
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("unexpected reply {out:#?}"));
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{out:#?}"
    );
}

#[test]
fn call_get_name_owner_of_the_driver_is_the_driver() {
    let bus = Bus::start();
    let out = busctl(
        &bus,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetNameOwner",
            "s",
            "org.freedesktop.DBus",
        ],
    );
    assert_eq!(out.stdout.trim(), r#"s "org.freedesktop.DBus""#, "{out:#?}");
}

#[test]
fn introspect_lists_the_driver_methods_and_signals() {
    let bus = Bus::start();
    let out = busctl(
        &bus,
        &[
            "introspect",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
        ],
    );
    let has_row = |member: &str, kind: &str| {
        out.stdout.lines().any(|line| {
            let mut columns = line.split_whitespace();
            columns.next() == Some(member) && columns.next() == Some(kind)
        })
    };
    for (member, kind) in [
        ("org.freedesktop.DBus", "interface"),
        (".RequestName", "method"),
        (".ListNames", "method"),
        (".NameOwnerChanged", "signal"),
        ("org.freedesktop.DBus.Introspectable", "interface"),
    ] {
        assert!(has_row(member, kind), "no {kind} {member}: {out:#?}");
    }
}

#[test]
fn tree_of_the_driver_contains_its_object() {
    let bus = Bus::start();
    let out = busctl(&bus, &["tree", "org.freedesktop.DBus"]);
    assert!(
        out.stdout
            .lines()
            .any(|line| line.ends_with("/org/freedesktop/DBus")),
        "{out:#?}"
    );
}

#[test]
fn call_reaches_a_python_service_and_returns_its_reply() {
    let bus = Bus::start();
    let mut service = bus.peer();
    service.serve("/com/example/Test");
    assert_eq!(service.request_name("com.example.Service", 0), 1);
    let out = busctl(
        &bus,
        &[
            "call",
            "com.example.Service",
            "/com/example/Test",
            "com.example.Test",
            "Echo",
            "s",
            "hello from busctl",
        ],
    );
    assert_eq!(out.stdout.trim(), r#"s "hello from busctl""#, "{out:#?}");
    service.wait_event(|e| e.starts_with(r#"called Echo ["hello from busctl"] no_reply=False"#));
}

#[test]
fn call_of_a_failing_method_reports_the_service_error() {
    let bus = Bus::start();
    let mut service = bus.peer();
    service.serve("/com/example/Test");
    let out = bus
        .run(
            "busctl",
            &[
                "--user",
                "call",
                service.unique_name(),
                "/com/example/Test",
                "com.example.Test",
                "Fail",
            ],
        )
        .failure();
    assert!(out.stderr.contains("failed on purpose"), "{out:#?}");
}
