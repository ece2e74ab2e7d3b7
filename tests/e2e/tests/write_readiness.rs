//! Output that does not fit in a receiver's socket waits in the daemon and
//! goes out as the receiver reads: the daemon must learn when the socket
//! has room again (it watches for writability only while output waits).

use quickbus_client::Connection;
use quickbus_e2e::{Bus, TIMEOUT};
use quickbus_wire::{MessageBuilder, Value};

/// Several times any socket buffer the kernel allows by default.
const PAYLOAD: usize = 4 << 20;
const MESSAGES: u32 = 3;

#[test]
fn messages_larger_than_the_socket_buffer_reach_a_late_reader_whole_and_in_order() {
    let bus = Bus::start();
    let mut receiver = Connection::connect_with_timeout(bus.address(), TIMEOUT).expect("connect");
    receiver.set_timeout(Some(TIMEOUT)).expect("timeout");
    let destination = receiver.unique_name().to_owned();
    let address = bus.address().to_owned();
    // The receiver reads nothing until every message is sent, so the
    // daemon must queue most of them and resume as the socket drains.
    let sender = std::thread::spawn(move || {
        let mut sender = Connection::connect_with_timeout(&address, TIMEOUT).expect("connect");
        let mut serials = Vec::new();
        for i in 0..MESSAGES {
            let payload = char::from(b'a' + i as u8).to_string().repeat(PAYLOAD);
            let signal = MessageBuilder::signal("/big", "org.example.Big", "Chunk")
                .destination(destination.as_str())
                .body(vec![Value::String(payload)]);
            serials.push(sender.send(signal, &[]).expect("send"));
        }
        (sender, serials)
    });
    let (_sender, serials) = sender.join().expect("sender thread");
    let mut got = Vec::new();
    while got.len() < MESSAGES as usize {
        let (message, _) = receiver.receive().expect("a queued message arrives");
        if message.member() != Some("Chunk") {
            continue; // NameAcquired and the like
        }
        let values = message.body_values().expect("body");
        let [Value::String(text)] = values.as_slice() else {
            panic!("unexpected body {values:?}");
        };
        let expected = char::from(b'a' + got.len() as u8);
        assert_eq!(text.len(), PAYLOAD);
        assert!(
            text.chars().all(|c| c == expected),
            "message {} mixed up",
            got.len()
        );
        got.push(message.serial());
    }
    assert_eq!(got, serials);
}
