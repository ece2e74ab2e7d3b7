//! A SASL conversation line by line on a fresh connection, for the state
//! table scenarios (`sasl/...`): each line the client sends is recorded
//! with the bus's answer, normalised (the GUID of OK and the random
//! DBUS_COOKIE_SHA1 challenge stand for themselves), so both buses'
//! conversations compare as text.
//!
//! Every command but BEGIN is answered with exactly one line (the spec's
//! state machine), or the bus closes the connection: a step waits for
//! one or the other, never for a time. After BEGIN the client sends Hello
//! and records whether a message came back or the connection closed.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use quickbus_client::sasl::decode_hex;
use quickbus_client::MessageBuilder;

use crate::script::bus_call;
use crate::TIMEOUT;

/// What the bus said to each line: the transcript of one conversation.
pub fn converse(socket: &Path, lines: &[Vec<u8>]) -> Vec<String> {
    let mut transcript = Vec::new();
    let mut stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(e) => return vec![format!("-- cannot connect: {e} --")],
    };
    let mut input = Vec::new();
    if stream.write_all(b"\0").is_err() {
        return vec![CLOSED.into()];
    }
    for line in lines {
        transcript.push(format!(
            "sent: {}",
            String::from_utf8_lossy(line).escape_debug()
        ));
        let mut bytes = line.clone();
        bytes.extend_from_slice(b"\r\n");
        if stream.write_all(&bytes).is_err() {
            transcript.push(CLOSED.into());
            return transcript;
        }
        if line.as_slice() == b"BEGIN" || line.starts_with(b"BEGIN ") {
            transcript.push(after_begin(&mut stream, &mut input));
            return transcript;
        }
        match read_line(&mut stream, &mut input) {
            Some(reply) => transcript.push(format!("got: {}", normalize(&reply))),
            None => {
                transcript.push(CLOSED.into());
                return transcript;
            }
        }
    }
    transcript
}

/// What a transcript shows where the bus closed the connection.
pub(crate) const CLOSED: &str = "-- the bus closed the connection --";

/// Sends Hello and says whether a message or the end of the stream came.
fn after_begin(stream: &mut UnixStream, input: &mut Vec<u8>) -> String {
    let hello: MessageBuilder = bus_call("Hello");
    let bytes = hello.build(1).expect("Hello builds");
    if stream.write_all(&bytes).is_err() {
        return CLOSED.into();
    }
    let deadline = Instant::now() + TIMEOUT;
    while input.is_empty() {
        match read_some(stream, input, deadline) {
            Some(true) => {}
            Some(false) => return CLOSED.into(),
            None => return "-- nothing within the harness's time limit --".into(),
        }
    }
    if input[0] != b'l' {
        return format!("-- not a message after BEGIN: {} --", normalize(input));
    }
    "-- BEGIN accepted: Hello was answered --".into()
}

/// One line from the bus, without its `\r\n`; None when the bus closed the
/// connection (or the harness's time limit passed, recorded the same way
/// on both buses only if both stall, which the diff then shows).
fn read_line(stream: &mut UnixStream, input: &mut Vec<u8>) -> Option<Vec<u8>> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(end) = input.windows(2).position(|w| w == b"\r\n") {
            let line = input[..end].to_vec();
            input.drain(..end + 2);
            return Some(line);
        }
        match read_some(stream, input, deadline) {
            Some(true) => {}
            Some(false) | None => return None,
        }
    }
}

/// Appends what arrives; Some(false) at the end of the stream (or a reset),
/// None past the deadline.
fn read_some(stream: &mut UnixStream, input: &mut Vec<u8>, deadline: Instant) -> Option<bool> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return None;
    }
    stream
        .set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .ok()?;
    let mut buf = [0u8; 4096];
    match stream.read(&mut buf) {
        Ok(0) => Some(false),
        Ok(n) => {
            input.extend_from_slice(&buf[..n]);
            Some(true)
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Some(true),
        Err(_) => Some(false),
    }
}

/// The reply with what differs between any two runs replaced: the GUID
/// after OK, and a DBUS_COOKIE_SHA1 challenge (context, cookie id, random
/// text, hex-encoded).
fn normalize(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply).into_owned();
    if let Some(guid) = text.strip_prefix("OK ") {
        if guid.len() == 32 && guid.bytes().all(|b| b.is_ascii_hexdigit()) {
            return "OK <guid>".into();
        }
    }
    if let Some(hex) = text.strip_prefix("DATA ") {
        if decode_hex(hex).is_some_and(|data| data.starts_with(b"org_freedesktop_general ")) {
            return "DATA <cookie challenge>".into();
        }
    }
    text.escape_debug().to_string()
}
