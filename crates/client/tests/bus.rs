//! The client against a real bus daemon (QUICKBUS_TEST_DAEMON, default the
//! workspace's quickbus-daemon).

use std::os::fd::AsFd;
use std::time::Duration;

use quickbus_client::{CallError, Connection, Error, MessageBuilder, MessageType, Value};
use quickbus_e2e::Bus as TestBus;

const NAME_HAS_NO_OWNER: &str = "org.freedesktop.DBus.Error.NameHasNoOwner";

#[test]
fn hello_gives_a_unique_name_and_get_id_a_guid() {
    let bus = TestBus::start();
    let mut a = bus.connect();
    let mut b = bus.connect();
    assert!(a.unique_name().starts_with(':'), "{}", a.unique_name());
    assert_ne!(a.unique_name(), b.unique_name());
    let id = a.get_id().unwrap();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    // The GUID of the listening address (dbus-daemon's differs from the
    // bus id).
    assert_eq!(a.server_guid().len(), 32, "{}", a.server_guid());
    assert_eq!(b.get_id().unwrap(), id);
    assert!(a.can_pass_fds());
}

#[test]
fn error_replies_become_call_errors() {
    let bus = TestBus::start();
    let mut conn = bus.connect();
    match conn.get_name_owner("org.example.Nobody") {
        Err(CallError::Remote(e)) => {
            assert_eq!(e.name, NAME_HAS_NO_OWNER);
            assert!(!e.message.is_empty());
        }
        other => panic!("expected an error reply, got {other:?}"),
    }
    // The connection is still usable afterwards.
    assert_eq!(
        conn.get_name_owner(conn.unique_name().to_owned().as_str())
            .unwrap(),
        conn.unique_name()
    );
}

#[test]
fn request_name_and_get_name_owner() {
    let bus = TestBus::start();
    let mut owner = bus.connect();
    let mut other = bus.connect();
    assert_eq!(owner.request_name("org.example.Owned", 0).unwrap(), 1);
    assert_eq!(owner.request_name("org.example.Owned", 0).unwrap(), 4);
    // DO_NOT_QUEUE: the name exists.
    assert_eq!(other.request_name("org.example.Owned", 4).unwrap(), 3);
    assert_eq!(
        other.get_name_owner("org.example.Owned").unwrap(),
        owner.unique_name()
    );
    assert_eq!(owner.release_name("org.example.Owned").unwrap(), 1);
    assert_eq!(
        other
            .get_name_owner("org.example.Owned")
            .unwrap_err()
            .dbus_name(),
        Some(NAME_HAS_NO_OWNER)
    );
}

/// Skip the bus's own signals (NameAcquired after Hello) until a message
/// that is not from the bus driver arrives.
fn receive_from_peer(conn: &mut Connection) -> quickbus_client::Received {
    for _ in 0..100 {
        let (message, fds) = conn.receive().unwrap();
        if message.sender() != Some("org.freedesktop.DBus") {
            return (message, fds);
        }
    }
    panic!("only bus driver messages arrived");
}

#[test]
fn fds_make_a_round_trip_through_the_bus() {
    let bus = TestBus::start();
    let mut server = bus.connect();
    let mut client = bus.connect();
    let (read_end, write_end) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();

    let call = MessageBuilder::method_call("/fd", "Echo")
        .interface("org.example.Fd")
        .destination(server.unique_name())
        .body(vec![Value::UnixFd(0)]);
    let serial = client.send(call, &[read_end.as_fd()]).unwrap();
    drop(read_end);

    let (request, fds) = receive_from_peer(&mut server);
    assert_eq!(request.member(), Some("Echo"));
    assert_eq!(request.signature(), "h");
    assert_eq!(request.unix_fds(), 1);
    assert_eq!(fds.len(), 1);
    let reply = MessageBuilder::method_return(request.serial())
        .destination(request.sender().unwrap())
        .body(vec![Value::UnixFd(0)]);
    server.send(reply, &[fds[0].as_fd()]).unwrap();
    drop(fds);

    let (reply, mut back) = client.wait_reply(serial).unwrap();
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
    assert_eq!(back.len(), 1);
    let fd = back.pop().unwrap();
    rustix::io::write(&write_end, b"through the bus").unwrap();
    let mut buf = [0u8; 15];
    let n = rustix::io::read(&fd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"through the bus");
}

#[test]
fn messages_arriving_during_a_call_are_kept_for_receive() {
    let bus = TestBus::start();
    let mut listener = bus.connect();
    let mut emitter = bus.connect();
    let signal = MessageBuilder::signal("/s", "org.example.Signals", "Ping")
        .destination(listener.unique_name())
        .body(vec![Value::String("hello".into())]);
    emitter.send(signal, &[]).unwrap();
    // Once the bus answered the emitter, it has routed the signal: it sits
    // in the listener's socket before the reply to the listener's call.
    emitter.get_id().unwrap();
    listener.get_id().unwrap();
    let (message, _) = receive_from_peer(&mut listener);
    assert_eq!(message.msg_type(), MessageType::Signal);
    assert_eq!(message.member(), Some("Ping"));
    assert_eq!(message.sender(), Some(emitter.unique_name()));
    assert_eq!(
        message.body_values().unwrap(),
        vec![Value::String("hello".into())]
    );
}

#[test]
fn add_match_delivers_broadcast_signals() {
    let bus = TestBus::start();
    let mut listener = bus.connect();
    let mut emitter = bus.connect();
    listener
        .add_match("type='signal',interface='org.example.Broadcast'")
        .unwrap();
    for member in ["Ignored", "Wanted"] {
        let interface = if member == "Wanted" {
            "org.example.Broadcast"
        } else {
            "org.example.Other"
        };
        emitter
            .send(MessageBuilder::signal("/b", interface, member), &[])
            .unwrap();
    }
    emitter.get_id().unwrap();
    let (message, _) = receive_from_peer(&mut listener);
    assert_eq!(message.member(), Some("Wanted"));
    listener
        .remove_match("type='signal',interface='org.example.Broadcast'")
        .unwrap();
}

#[test]
fn a_silent_bus_times_out_instead_of_hanging() {
    let bus = TestBus::start();
    let mut conn = bus.connect();
    conn.set_timeout(Some(Duration::from_millis(100))).unwrap();
    // Drain whatever the bus sent on its own, then nothing more comes.
    let mut result = conn.receive();
    for _ in 0..100 {
        if result.is_err() {
            break;
        }
        result = conn.receive();
    }
    assert!(matches!(result, Err(Error::Timeout)), "{:?}", result.err());
}

#[test]
fn connecting_to_nothing_fails_clearly() {
    let bus = TestBus::start();
    let missing = format!("unix:path={}/nope", bus.dir().display());
    let err = Connection::connect(&missing)
        .err()
        .expect("no socket there");
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(err.to_string().contains("nope"), "{err}");
    // A list falls through to the entry that works.
    let list = format!("{missing};{}", bus.address());
    assert!(Connection::connect(&list).is_ok());
}

#[test]
fn a_call_nobody_answers_times_out() {
    let bus = TestBus::start();
    let mut silent = bus.connect();
    let mut caller = bus.connect();
    caller
        .set_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let call = MessageBuilder::method_call("/", "NeverAnswered")
        .interface("org.example.Silent")
        .destination(silent.unique_name());
    let err = caller.call(call).expect_err("no reply can come");
    assert!(
        matches!(err, CallError::Connection(Error::Timeout)),
        "{err}"
    );
    // The call did reach the callee.
    let (message, _) = receive_from_peer(&mut silent);
    assert_eq!(message.member(), Some("NeverAnswered"));
}

#[test]
fn a_large_message_arrives_whole() {
    let bus = TestBus::start();
    let mut receiver = bus.connect();
    let mut sender = bus.connect();
    let payload: Vec<Value> = (0..1_000_000u32).map(|i| Value::Byte(i as u8)).collect();
    let call = MessageBuilder::method_call("/big", "Take")
        .interface("org.example.Big")
        .destination(receiver.unique_name())
        .flags(quickbus_wire::flags::NO_REPLY_EXPECTED)
        .body(vec![Value::Array {
            elem_sig: "y".into(),
            items: payload.clone(),
        }]);
    sender.send(call, &[]).unwrap();
    let (message, _) = receive_from_peer(&mut receiver);
    assert_eq!(message.member(), Some("Take"));
    match message.body_values().unwrap().pop() {
        Some(Value::Array { items, .. }) => assert!(items == payload),
        other => panic!("unexpected body {other:?}"),
    }
}

#[test]
fn a_burst_sent_as_one_batch_arrives_complete_and_in_order() {
    let bus = TestBus::start();
    let mut listener = bus.connect();
    let mut emitter = bus.connect();
    let destination = listener.unique_name().to_owned();
    let batch: Vec<bytes::Bytes> = (0..1000u32)
        .map(|i| {
            MessageBuilder::signal("/burst", "org.example.Burst", "Item")
                .destination(&destination)
                .body(vec![Value::Uint32(i)])
                .build(emitter.next_serial())
                .unwrap()
        })
        .collect();
    emitter.send_batch(&batch).unwrap();
    let mut next = 0u32;
    while next < 1000 {
        let (message, _) = receive_from_peer(&mut listener);
        assert_eq!(message.body_values().unwrap(), vec![Value::Uint32(next)]);
        next += 1;
    }
}
