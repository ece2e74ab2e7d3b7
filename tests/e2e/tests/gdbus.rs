//! gdbus (GDBus/GLib) against the bus driver and dbus-python peers.

use std::time::Duration;

use quickbus_e2e::{Bus, TIMEOUT};

/// Runs `gdbus call --session --dest org.freedesktop.DBus --object-path
/// /org/freedesktop/DBus --method org.freedesktop.DBus.<method> <args>`.
fn call_driver(bus: &Bus, method: &str, args: &[&str]) -> quickbus_e2e::Finished {
    let method = format!("org.freedesktop.DBus.{method}");
    let mut argv = vec![
        "call",
        "--session",
        "--dest",
        "org.freedesktop.DBus",
        "--object-path",
        "/org/freedesktop/DBus",
        "--method",
        &method,
    ];
    argv.extend_from_slice(args);
    bus.run("gdbus", &argv)
}

#[test]
fn call_name_has_owner_and_get_name_owner() {
    let bus = Bus::start();
    let mut peer = bus.peer();
    assert_eq!(peer.request_name("com.example.Gdbus", 0), 1);
    let out = call_driver(&bus, "NameHasOwner", &["com.example.Gdbus"]).success();
    assert_eq!(out.stdout.trim(), "(true,)", "{out:#?}");
    let out = call_driver(&bus, "NameHasOwner", &["com.example.Nobody"]).success();
    assert_eq!(out.stdout.trim(), "(false,)", "{out:#?}");
    let out = call_driver(&bus, "GetNameOwner", &["com.example.Gdbus"]).success();
    assert_eq!(
        out.stdout.trim(),
        format!("('{}',)", peer.unique_name()),
        "{out:#?}"
    );
}

#[test]
fn call_list_names_includes_the_driver() {
    let bus = Bus::start();
    let out = call_driver(&bus, "ListNames", &[]).success();
    assert!(out.stdout.contains("'org.freedesktop.DBus'"), "{out:#?}");
}

#[test]
fn call_get_name_owner_of_an_unknown_name_fails_with_name_has_no_owner() {
    let bus = Bus::start();
    let out = call_driver(&bus, "GetNameOwner", &["com.example.Nobody"]).failure();
    assert!(
        out.stderr
            .contains("org.freedesktop.DBus.Error.NameHasNoOwner"),
        "{out:#?}"
    );
}

#[test]
fn introspect_shows_the_driver_interface() {
    let bus = Bus::start();
    let out = bus
        .run(
            "gdbus",
            &[
                "introspect",
                "--session",
                "--dest",
                "org.freedesktop.DBus",
                "--object-path",
                "/org/freedesktop/DBus",
            ],
        )
        .success();
    for expected in [
        "interface org.freedesktop.DBus {",
        "RequestName(",
        "NameOwnerChanged(",
        "interface org.freedesktop.DBus.Introspectable {",
    ] {
        assert!(
            out.stdout.contains(expected),
            "missing {expected}: {out:#?}"
        );
    }
}

#[test]
fn emit_reaches_a_python_receiver_with_a_match_rule() {
    let bus = Bus::start();
    let mut receiver = bus.peer();
    receiver.add_match("type='signal',interface='com.example.Gdbus'");
    bus.run(
        "gdbus",
        &[
            "emit",
            "--session",
            "--object-path",
            "/com/example/Gdbus",
            "--signal",
            "com.example.Gdbus.Hello",
            "'world'",
            "42",
        ],
    )
    .success();
    let event = receiver.wait_event(|e| e.starts_with("signal com.example.Gdbus.Hello "));
    assert!(event.contains(" path=/com/example/Gdbus "), "{event}");
    assert!(event.contains(" dest=- "), "{event}");
    assert!(event.ends_with(r#"args=["world", 42]"#), "{event}");
}

#[test]
fn emit_with_a_destination_reaches_only_that_peer() {
    let bus = Bus::start();
    let mut target = bus.peer();
    let mut bystander = bus.peer();
    bystander.add_match("type='signal',interface='com.example.Gdbus'");
    bus.run(
        "gdbus",
        &[
            "emit",
            "--session",
            "--dest",
            target.unique_name(),
            "--object-path",
            "/com/example/Gdbus",
            "--signal",
            "com.example.Gdbus.Direct",
        ],
    )
    .success();
    let event = target.wait_event(|e| e.starts_with("signal com.example.Gdbus.Direct "));
    assert!(
        event.contains(&format!(" dest={} ", target.unique_name())),
        "{event}"
    );
    // A broadcast the bystander's rule matches, sent after the unicast by
    // another gdbus: once it arrived, the unicast would have too.
    bus.run(
        "gdbus",
        &[
            "emit",
            "--session",
            "--object-path",
            "/com/example/Gdbus",
            "--signal",
            "com.example.Gdbus.Broadcast",
        ],
    )
    .success();
    bystander.wait_event(|e| e.starts_with("signal com.example.Gdbus.Broadcast "));
    assert!(
        !bystander
            .events()
            .iter()
            .any(|e| e.contains("Gdbus.Direct")),
        "{:#?}",
        bystander.events()
    );
}

#[test]
fn monitor_of_a_name_prints_the_signals_its_owner_emits() {
    let bus = Bus::start();
    let mut emitter = bus.peer();
    assert_eq!(emitter.request_name("com.example.Emitter", 0), 1);
    let mut monitor = bus.spawn(
        "gdbus",
        &["monitor", "--session", "--dest", "com.example.Emitter"],
    );
    // gdbus installs its match rule asynchronously and says nothing when it
    // is in place, so emit until the monitor shows the signal.
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut seen = Vec::new();
    loop {
        emitter.emit(
            r#"{"path": "/com/example/Emitter", "iface": "com.example.Emitter", "member": "Tick", "args": [["s", "tock"]]}"#,
        );
        while let Some(line) = monitor.try_read_line(Duration::from_millis(200)) {
            if line.contains("/com/example/Emitter: com.example.Emitter.Tick ('tock',)") {
                return;
            }
            seen.push(line);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "gdbus monitor never showed the signal; it printed {seen:#?}; stderr: {}",
            monitor.stderr()
        );
    }
}
