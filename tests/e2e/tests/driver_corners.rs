//! Corners of the driver and of routing where real clients found quickbus
//! answering differently from dbus-daemon (issue 14): driver calls before
//! Hello, org.freedesktop.DBus.Peer calls with no destination, the NameLost
//! a departing connection is sent, and bodies holding an fd index with no
//! fds. Every test passes against QUICKBUS_TEST_DAEMON=/usr/bin/dbus-daemon.

// Shared with hostile.rs, which uses the rest of it.
#[allow(dead_code)]
#[path = "hostile/support.rs"]
mod support;

use std::io::Write;
use std::os::unix::net::UnixStream;

use quickbus_client::{bus_call, Message, MessageBuilder, MessageType, Value, BUS_NAME};
use quickbus_e2e::{become_monitor, read_raw_message};
use support::*;

const NOT_REGISTERED: &str =
    "Client tried to send a message other than Hello without being registered";
const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";
const UNKNOWN_METHOD: &str = "org.freedesktop.DBus.Error.UnknownMethod";
const PEER: &str = "org.freedesktop.DBus.Peer";

fn send(stream: &mut UnixStream, builder: MessageBuilder, serial: u32) {
    let bytes = builder.build(serial).expect("build");
    stream.write_all(&bytes).expect("send");
}

/// The next message on `stream`, which must answer `serial`.
fn answer_to(stream: &mut UnixStream, serial: u32) -> Message {
    let reply = read_raw_message(stream);
    assert_eq!(reply.reply_serial(), Some(serial), "{}", describe(&reply));
    reply
}

fn text_of(message: &Message) -> String {
    match message.body_values().expect("body").first() {
        Some(Value::String(text)) => text.clone(),
        other => panic!("no text in {}: {other:?}", describe(message)),
    }
}

/// The number N of a unique name ":1.N".
fn number(name: &str) -> u64 {
    name.rsplit('.')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a unique name: {name}"))
}

fn hello(stream: &mut UnixStream, serial: u32) -> String {
    send(stream, bus_call("Hello"), serial);
    let reply = answer_to(stream, serial);
    assert_eq!(
        reply.msg_type(),
        MessageType::MethodReturn,
        "{}",
        describe(&reply)
    );
    text_of(&reply)
}

fn peer_call(member: &str) -> MessageBuilder {
    MessageBuilder::method_call("/", member).interface(PEER)
}

#[test]
fn driver_messages_before_hello_are_refused_and_hello_still_works() {
    let mut scene = Scene::start();
    // The newest name so far.
    let before = scene.witness.unique_name().to_owned();
    let mut early = scene.bus.authenticated_raw();
    let refused = [
        bus_call("GetId"),
        bus_call("RequestName").body(vec![
            Value::String("org.example.Early".into()),
            Value::Uint32(0),
        ]),
        bus_call("NoSuchMethod"),
        bus_call("GetId").flags(quickbus_wire::flags::NO_REPLY_EXPECTED),
        peer_call("Ping").destination(BUS_NAME),
        MessageBuilder::signal("/org/example", "org.example.I", "S").destination(BUS_NAME),
    ];
    for (serial, builder) in (1..).zip(refused) {
        send(&mut early, builder, serial);
        let error = answer_to(&mut early, serial);
        assert_eq!(
            error.error_name(),
            Some(ACCESS_DENIED),
            "{}",
            describe(&error)
        );
        assert_eq!(text_of(&error), NOT_REGISTERED);
        assert_eq!(error.sender(), Some(BUS_NAME));
    }
    // The connection is still there and no unique name was used up.
    let name = hello(&mut early, 100);
    assert_eq!(number(&name), number(&before) + 1, "{before} then {name}");
    scene.assert_unharmed_and_untouched();
}

#[test]
fn a_signal_to_nobody_before_hello_is_cut_off() {
    let mut scene = Scene::start();
    let mut early = scene.bus.authenticated_raw();
    send(
        &mut early,
        MessageBuilder::signal("/org/example", "org.example.I", "S"),
        1,
    );
    expect_raw_closed(&mut early);
    scene.assert_unharmed_and_untouched();
}

#[test]
fn peer_calls_without_destination_are_answered_by_the_bus() {
    let mut scene = Scene::start();
    let machine_id = {
        let call = peer_call("GetMachineId").destination(BUS_NAME);
        text_of(&scene.victim.call(call).expect("GetMachineId of the bus"))
    };
    let mut peer = scene.bus.authenticated_raw();
    // Before Hello too.
    send(&mut peer, peer_call("Ping"), 1);
    assert_eq!(
        answer_to(&mut peer, 1).msg_type(),
        MessageType::MethodReturn
    );
    hello(&mut peer, 2);
    let _name_acquired = read_raw_message(&mut peer);
    send(&mut peer, peer_call("Ping"), 3);
    let pong = answer_to(&mut peer, 3);
    assert_eq!(
        pong.msg_type(),
        MessageType::MethodReturn,
        "{}",
        describe(&pong)
    );
    assert!(pong.body_values().expect("body").is_empty());
    send(&mut peer, peer_call("GetMachineId"), 4);
    assert_eq!(text_of(&answer_to(&mut peer, 4)), machine_id);
    // Anything else on Peer is unknown, as is a driver method that is not
    // addressed to the driver.
    send(&mut peer, peer_call("Other"), 5);
    let other = answer_to(&mut peer, 5);
    assert_eq!(other.error_name(), Some(UNKNOWN_METHOD));
    assert_eq!(
        text_of(&other),
        "Unknown method invoked on org.freedesktop.DBus.Peer interface"
    );
    let get_id = MessageBuilder::method_call("/org/freedesktop/DBus", "GetId")
        .interface("org.freedesktop.DBus");
    send(&mut peer, get_id, 6);
    let unknown = answer_to(&mut peer, 6);
    assert_eq!(unknown.error_name(), Some(UNKNOWN_METHOD));
    assert_eq!(
        text_of(&unknown),
        "Method \"GetId\" with signature \"\" on interface \"org.freedesktop.DBus\" doesn't exist\n"
    );
    scene.assert_unharmed_and_untouched();
}

#[test]
fn calls_to_nobody_reach_no_match_rule_and_no_monitor() {
    let mut scene = Scene::start();
    let mut spy = scene.bus.connect();
    spy.add_match("type='method_call'").expect("AddMatch");
    spy.add_match("member='Marker'").expect("AddMatch");
    let mut monitor = scene.bus.connect();
    become_monitor(&mut monitor, &["interface='org.example.Nobody'"]);
    let mut caller = scene.bus.connect();
    let call = MessageBuilder::method_call("/", "M").interface("org.example.Nobody");
    let serial = caller.send(call, &[]).expect("send");
    let (error, _) = caller.wait_reply(serial).expect_err_or_error();
    assert_eq!(error, UNKNOWN_METHOD);
    // A marker signal both would see: whatever they got before it came
    // first.
    let marker = MessageBuilder::signal("/", "org.example.Nobody", "Marker");
    caller.send(marker, &[]).expect("send the marker");
    for conn in [&mut spy, &mut monitor] {
        loop {
            let (message, _) = conn.receive().expect("receive");
            if message.sender() == Some(BUS_NAME) {
                continue;
            }
            assert_eq!(message.member(), Some("Marker"), "{}", describe(&message));
            break;
        }
    }
    scene.assert_unharmed();
}

/// What a monitor saw of the bus's name signals while a connection left.
fn name_signal(message: &Message) -> Option<(String, Vec<String>, Option<String>)> {
    if message.sender() != Some(BUS_NAME) || message.msg_type() != MessageType::Signal {
        return None;
    }
    let args = message
        .body_values()
        .expect("body")
        .into_iter()
        .map(|v| match v {
            Value::String(s) => s,
            other => panic!("{other:?}"),
        })
        .collect();
    Some((
        message.member()?.to_owned(),
        args,
        message.destination().map(str::to_owned),
    ))
}

#[test]
fn a_departing_connection_is_sent_name_lost_before_each_name_owner_changed() {
    let scene = Scene::start();
    let mut leaver = scene.bus.connect();
    let mut heir = scene.bus.connect();
    let mut monitor = scene.bus.connect();
    let (a, b) = (
        leaver.unique_name().to_owned(),
        heir.unique_name().to_owned(),
    );
    assert_eq!(leaver.request_name("org.example.One", 0).expect("One"), 1);
    assert_eq!(leaver.request_name("org.example.Two", 0).expect("Two"), 1);
    assert_eq!(heir.request_name("org.example.One", 0).expect("queued"), 2);
    become_monitor(&mut monitor, &["sender='org.freedesktop.DBus'"]);
    let own = monitor.unique_name().to_owned();
    drop(leaver);
    let mut seen = Vec::new();
    let done = (
        "NameOwnerChanged".to_owned(),
        vec![a.clone(), a.clone(), String::new()],
    );
    loop {
        let (message, _) = monitor.receive().expect("the monitor receives");
        let Some((member, args, destination)) = name_signal(&message) else {
            continue;
        };
        // The monitor's own NameLost, from becoming one.
        if destination.as_deref() == Some(own.as_str()) {
            continue;
        }
        let last = (member.clone(), args.clone()) == done;
        seen.push((member, args, destination));
        if last {
            break;
        }
    }
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let signal = |member: &str, args: &[&str], to: Option<&str>| {
        (member.to_owned(), strings(args), to.map(str::to_owned))
    };
    assert_eq!(
        seen,
        vec![
            signal("NameLost", &["org.example.Two"], Some(&a)),
            signal("NameOwnerChanged", &["org.example.Two", &a, ""], None),
            signal("NameLost", &["org.example.One"], Some(&a)),
            signal("NameOwnerChanged", &["org.example.One", &a, &b], None),
            signal("NameAcquired", &["org.example.One"], Some(&b)),
            signal("NameLost", &[&a], Some(&a)),
            signal("NameOwnerChanged", &[&a, &a, ""], None),
        ]
    );
}

/// `wait_reply` for a call that must fail: the error's name.
trait ExpectError {
    fn expect_err_or_error(self) -> (String, ());
}

impl ExpectError for Result<quickbus_client::Received, quickbus_client::CallError> {
    fn expect_err_or_error(self) -> (String, ()) {
        match self {
            Err(quickbus_client::CallError::Remote(error)) => (error.name, ()),
            Ok((reply, _)) => panic!("expected an error, got {}", describe(&reply)),
            Err(e) => panic!("the call broke the connection: {e}"),
        }
    }
}

/// The bytes of `builder` (whose body is one `u`) with the body's type
/// changed to `h`: an fd index, with no UNIX_FDS field and no fds, which
/// the builder itself would refuse to make.
fn with_fd_index_and_no_fds(builder: MessageBuilder, serial: u32) -> Vec<u8> {
    let mut bytes = builder
        .body(vec![Value::Uint32(0)])
        .build(serial)
        .expect("build")
        .to_vec();
    // The SIGNATURE field: code 8, type "g", then the signature "u".
    let field = [8u8, 1, b'g', 0, 1, b'u', 0];
    let at = bytes
        .windows(field.len())
        .position(|w| w == field)
        .expect("a SIGNATURE field of \"u\"");
    bytes[at + 5] = b'h';
    bytes
}

#[test]
fn an_fd_index_without_fds_is_routed_for_the_receiver_to_judge() {
    let mut scene = Scene::start();
    let mut listener = scene.bus.connect();
    listener
        .add_match("interface='org.example.Fds'")
        .expect("AddMatch");
    let mut sender = scene.bus.connect();
    let signal = MessageBuilder::signal("/org/example", "org.example.Fds", "Broken");
    let serial = sender.next_serial();
    sender
        .send_raw(&with_fd_index_and_no_fds(signal, serial), &[])
        .expect("send the signal");
    let call = call_to_victim("Broken").interface("org.example.Fds");
    let call_serial = sender.next_serial();
    let call = with_fd_index_and_no_fds(
        call.flags(quickbus_wire::flags::NO_REPLY_EXPECTED),
        call_serial,
    );
    sender.send_raw(&call, &[]).expect("send the call");
    // The sender is still served.
    assert!(!sender
        .get_id()
        .expect("GetId after the messages")
        .is_empty());
    let (signal, fds) = loop {
        let (message, fds) = listener.receive().expect("the listener gets the signal");
        if message.sender() != Some(BUS_NAME) {
            break (message, fds);
        }
    };
    assert_eq!(signal.member(), Some("Broken"), "{}", describe(&signal));
    assert_eq!(signal.signature(), "h");
    assert_eq!(signal.unix_fds(), 0);
    assert!(fds.is_empty());
    assert_eq!(signal.body_values().expect("body"), vec![Value::UnixFd(0)]);
    let unsolicited = {
        scene.assert_unharmed();
        scene.victim_unsolicited()
    };
    assert_eq!(unsolicited.len(), 1, "{unsolicited:?}");
    assert!(unsolicited[0].contains("Broken"), "{unsolicited:?}");
}
