//! Reading D-Bus messages from a socket without a client library, for
//! tests that speak the protocol by hand.

use std::io::Read;
use std::os::unix::net::UnixStream;

use quickbus_client::Message;

/// One whole message from `stream` (bounded by its read time-out).
pub fn read_raw_message(stream: &mut UnixStream) -> Message {
    let mut buf = vec![0u8; quickbus_wire::MIN_HEADER_LEN];
    stream.read_exact(&mut buf).expect("read a message header");
    let total = quickbus_wire::frame_length(&buf)
        .expect("valid framing")
        .expect("16 bytes are enough");
    let start = buf.len();
    buf.resize(total, 0);
    stream
        .read_exact(&mut buf[start..])
        .expect("read a message");
    Message::parse(bytes::Bytes::from(buf)).expect("a valid message")
}
