//! dbus-python peers: method calls and replies between peers, one-way
//! calls, error replies, unicast signals, fd passing, credentials.

use quickbus_e2e::{Bus, Peer};

const SERVICE: &str = "com.example.Service";
const OBJECT: &str = "/com/example/Test";

/// A peer owning [`SERVICE`] and serving com.example.Test at [`OBJECT`].
fn service(bus: &Bus) -> Peer {
    let mut service = bus.peer();
    service.serve(OBJECT);
    assert_eq!(service.request_name(SERVICE, 0), 1);
    service
}

#[test]
fn a_method_call_round_trips_by_well_known_and_unique_name() {
    let bus = Bus::start();
    let mut service = service(&bus);
    let mut caller = bus.peer();
    let reply = caller.command(&format!(
        r#"call {SERVICE} {OBJECT} com.example.Test Echo s ["hello"]"#
    ));
    assert_eq!(reply, r#"call "hello""#);
    service.wait_event(|e| e == r#"called Echo ["hello"] no_reply=False"#);
    let reply = caller.command(&format!(
        r#"call {} {OBJECT} com.example.Test Echo s ["again"]"#,
        service.unique_name()
    ));
    assert_eq!(reply, r#"call "again""#);
}

#[test]
fn no_reply_expected_reaches_the_service_with_the_flag_set() {
    let bus = Bus::start();
    let mut service = service(&bus);
    let mut caller = bus.peer();
    let reply = caller.command(&format!(
        r#"call_noreply {SERVICE} {OBJECT} com.example.Test Record s ["one-way"]"#
    ));
    assert_eq!(reply, "call_noreply sent");
    service.wait_event(|e| e == r#"called Record ["one-way"] no_reply=True"#);
    // The caller's connection still works and nothing else came back.
    assert_eq!(caller.command("ping"), "pong");
}

#[test]
fn an_error_reply_reaches_the_caller() {
    let bus = Bus::start();
    let _service = service(&bus);
    let mut caller = bus.peer();
    let reply = caller.command(&format!(
        r#"call {SERVICE} {OBJECT} com.example.Test Fail - []"#
    ));
    assert_eq!(reply, "error com.example.Error.Failed failed on purpose");
}

#[test]
fn a_call_to_a_name_nobody_owns_is_service_unknown() {
    let bus = Bus::start();
    let mut caller = bus.peer();
    let reply = caller.command(&format!(
        r#"call com.example.Nobody {OBJECT} com.example.Test Echo s ["x"]"#
    ));
    assert!(
        reply.starts_with("error org.freedesktop.DBus.Error.ServiceUnknown "),
        "{reply}"
    );
}

#[test]
fn a_unicast_signal_reaches_its_destination_only() {
    let bus = Bus::start();
    let mut target = bus.peer();
    let mut bystander = bus.peer();
    let mut sender = bus.peer();
    bystander.add_match("type='signal',interface='com.example.Unicast'");
    sender.emit(&format!(
        r#"{{"path": "/u", "iface": "com.example.Unicast", "member": "Ping", "dest": "{}", "args": [["s", "for you"]]}}"#,
        target.unique_name()
    ));
    // The target has no match rule: addressed signals need none.
    let event = target.wait_event(|e| e.starts_with("signal com.example.Unicast.Ping "));
    let expected = format!(
        r#"signal com.example.Unicast.Ping path=/u sender={} dest={} args=["for you"]"#,
        sender.unique_name(),
        target.unique_name()
    );
    assert_eq!(event, expected);
    // A later broadcast from the same sender: once the bystander has it, it
    // would have had the unicast too.
    sender.emit(r#"{"path": "/u", "iface": "com.example.Unicast", "member": "Done"}"#);
    bystander.wait_event(|e| e.starts_with("signal com.example.Unicast.Done "));
    assert!(
        !bystander
            .events()
            .iter()
            .any(|e| e.contains("Unicast.Ping")),
        "{:#?}",
        bystander.events()
    );
}

#[test]
fn a_unix_fd_passes_through_the_bus() {
    let bus = Bus::start();
    let mut service = service(&bus);
    let mut caller = bus.peer();
    let reply = caller.command(&format!("sendfd {SERVICE} {OBJECT} bytes through a pipe"));
    assert_eq!(reply, r#"sendfd "bytes through a pipe""#);
    service.wait_event(|e| e == r#"called ReadFd ["bytes through a pipe"] no_reply=False"#);
}

#[test]
fn get_connection_credentials_of_self_and_of_another_peer() {
    let bus = Bus::start();
    let mut me = bus.peer();
    let other = bus.peer();
    let uid = rustix::process::getuid().as_raw();
    for (name, pid) in [
        (me.unique_name().to_owned(), me.pid()),
        (other.unique_name().to_owned(), other.pid()),
    ] {
        let creds = me.bus("GetConnectionCredentials", "s", &format!(r#"["{name}"]"#));
        assert!(
            creds.contains(&format!(r#""UnixUserID": {uid}"#)),
            "{creds}"
        );
        assert!(creds.contains(&format!(r#""ProcessID": {pid}"#)), "{creds}");
    }
    let reply = me.bus_call("GetConnectionCredentials", "s", r#"["com.example.Nobody"]"#);
    assert!(
        reply.starts_with("error org.freedesktop.DBus.Error.NameHasNoOwner "),
        "{reply}"
    );
}

#[test]
fn get_connection_unix_user_and_process_id_of_own_name() {
    let bus = Bus::start();
    let mut me = bus.peer();
    let own = format!(r#"["{}"]"#, me.unique_name());
    let uid = rustix::process::getuid().as_raw();
    assert_eq!(me.bus("GetConnectionUnixUser", "s", &own), uid.to_string());
    let pid = me.pid();
    assert_eq!(
        me.bus("GetConnectionUnixProcessID", "s", &own),
        pid.to_string()
    );
}

#[test]
fn name_has_owner_follows_ownership() {
    let bus = Bus::start();
    let mut owner = bus.peer();
    let mut asker = bus.peer();
    let query = format!(r#"["{SERVICE}"]"#);
    assert_eq!(asker.bus("NameHasOwner", "s", &query), "false");
    assert_eq!(owner.request_name(SERVICE, 0), 1);
    assert_eq!(asker.bus("NameHasOwner", "s", &query), "true");
    assert_eq!(owner.release_name(SERVICE), 1);
    assert_eq!(asker.bus("NameHasOwner", "s", &query), "false");
}

#[test]
fn a_one_megabyte_argument_round_trips() {
    let bus = Bus::start();
    let _service = service(&bus);
    let mut caller = bus.peer();
    let big = "q".repeat(1 << 20);
    let reply = caller.command(&format!(
        r#"call {SERVICE} {OBJECT} com.example.Test Echo s ["{big}"]"#
    ));
    assert!(
        reply == format!(r#"call "{big}""#),
        "reply of {} bytes differs",
        reply.len()
    );
}

#[test]
fn a_burst_of_signals_arrives_complete_and_in_order() {
    const COUNT: usize = 2000;
    let bus = Bus::start();
    let mut receiver = bus.peer();
    receiver.add_match("type='signal',interface='com.example.Burst'");
    let mut sender = bus.peer();
    let reply = sender.command(&format!(
        r#"emit_numbered {COUNT} {{"path": "/burst", "iface": "com.example.Burst", "member": "N"}}"#
    ));
    assert_eq!(reply, format!("emit_numbered sent {COUNT}"));
    for number in 0..COUNT {
        let event = receiver.wait_event(|e| e.starts_with("signal com.example.Burst.N "));
        assert!(
            event.ends_with(&format!(" args=[{number}]")),
            "signal {number}: {event}"
        );
    }
}

#[test]
fn a_caller_is_told_when_the_callee_disconnects_without_replying() {
    let bus = Bus::start();
    let mut service = service(&bus);
    let mut caller = bus.peer();
    caller.send(&format!(
        "call {SERVICE} {OBJECT} com.example.Test Hang - []"
    ));
    service.wait_event(|e| e.starts_with("called Hang "));
    service.kill();
    let reply = caller.result();
    assert!(
        reply.starts_with("error org.freedesktop.DBus.Error.NoReply "),
        "{reply}"
    );
}

#[test]
fn a_call_to_an_unknown_unique_name_is_service_unknown() {
    let bus = Bus::start();
    let mut caller = bus.peer();
    let reply = caller.command(&format!(
        r#"call :1.999999 {OBJECT} com.example.Test Echo s ["x"]"#
    ));
    assert!(
        reply.starts_with("error org.freedesktop.DBus.Error.ServiceUnknown "),
        "{reply}"
    );
}

#[test]
fn the_driver_refuses_unknown_methods_and_a_second_hello() {
    let bus = Bus::start();
    let mut peer = bus.peer();
    let reply = peer.bus_call("NoSuchMethod", "-", "[]");
    assert!(
        reply.starts_with("error org.freedesktop.DBus.Error.UnknownMethod "),
        "{reply}"
    );
    let reply = peer.bus_call("Hello", "-", "[]");
    assert!(reply.starts_with("error "), "{reply}");
    // The connection survives both.
    assert_eq!(peer.command("ping"), "pong");
}

#[test]
fn the_bus_overwrites_a_forged_sender() {
    let bus = Bus::start();
    let mut receiver = bus.peer();
    receiver.add_match("type='signal',interface='com.example.Forged'");
    let mut sender = bus.peer();
    sender.emit(
        r#"{"path": "/f", "iface": "com.example.Forged", "member": "S", "sender": "org.freedesktop.DBus"}"#,
    );
    let event = receiver.wait_event(|e| e.starts_with("signal com.example.Forged.S "));
    assert!(
        event.contains(&format!(" sender={} ", sender.unique_name())),
        "{event}"
    );
}

#[test]
fn a_broadcast_reaches_every_matching_receiver_in_order() {
    const RECEIVERS: usize = 5;
    const COUNT: usize = 200;
    let bus = Bus::start();
    let mut receivers: Vec<_> = (0..RECEIVERS).map(|_| bus.peer()).collect();
    for receiver in &mut receivers {
        receiver.add_match("type='signal',interface='com.example.Fanout'");
    }
    let mut bystander = bus.peer();
    bystander.add_match("type='signal',interface='com.example.Other'");
    let mut sender = bus.peer();
    sender.command(&format!(
        r#"emit_numbered {COUNT} {{"path": "/fan", "iface": "com.example.Fanout", "member": "N"}}"#
    ));
    sender.emit(r#"{"path": "/fan", "iface": "com.example.Other", "member": "Done"}"#);
    for receiver in &mut receivers {
        for number in 0..COUNT {
            let event = receiver.wait_event(|e| e.starts_with("signal com.example.Fanout.N "));
            assert!(event.ends_with(&format!(" args=[{number}]")), "{event}");
        }
    }
    bystander.wait_event(|e| e.starts_with("signal com.example.Other.Done "));
    assert!(
        !bystander.events().iter().any(|e| e.contains("Fanout")),
        "{:#?}",
        bystander.events()
    );
}
