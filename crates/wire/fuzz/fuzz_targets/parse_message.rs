//! Feeds arbitrary bytes to the message parser and checks that whatever it
//! accepts, the rest of the API handles consistently.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use quickbus_wire::{frame_length, Message, MessageBuilder};

fuzz_target!(|data: &[u8]| {
    let framed = frame_length(data);
    let Ok(message) = Message::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    assert_eq!(framed.ok().flatten(), Some(data.len()));

    let _ = message.string_args(64);
    let values = message.body_values().expect("an accepted body decodes");
    // Marshalling has no freedom (padding is zero, lengths are exact), so
    // the decoded values must marshal back to the very same body.
    let rebuilt = MessageBuilder::method_return(1)
        .endian(message.endian())
        .unix_fds(message.unix_fds())
        .body(values)
        .build(1)
        .expect("decoded values marshal again");
    let rebuilt = Message::parse(rebuilt).expect("rebuilt message parses");
    assert_eq!(rebuilt.body(), message.body());
    assert_eq!(rebuilt.signature(), message.signature());

    let frame = message.stamp(":1.42");
    assert_eq!(frame.header.len() % 8, 0);
    let mut joined = frame.header.to_vec();
    joined.extend_from_slice(&frame.body);
    let stamped = Message::parse(Bytes::from(joined)).expect("a stamped message parses");
    assert_eq!(stamped.sender(), Some(":1.42"));
    assert_eq!(stamped.path(), message.path());
    assert_eq!(stamped.interface(), message.interface());
    assert_eq!(stamped.member(), message.member());
    assert_eq!(stamped.error_name(), message.error_name());
    assert_eq!(stamped.destination(), message.destination());
    assert_eq!(stamped.reply_serial(), message.reply_serial());
    assert_eq!(stamped.unix_fds(), message.unix_fds());
    assert_eq!(stamped.body(), message.body());
});
