//! Driving the SASL exchange (crate::sasl) over the socket: EXTERNAL with
//! our uid, NEGOTIATE_UNIX_FD and BEGIN pipelined in one write (over tcp,
//! which has neither credentials nor fds: DBUS_COOKIE_SHA1 step by step,
//! else ANONYMOUS), then the server's replies read until the message
//! stream starts.

use crate::error::Error;
use crate::sasl::{self, Authenticated, Mode, Progress, SaslClient};
use crate::transport::Transport;

/// `mode` is how EXTERNAL goes on a unix socket (tcp's DBUS_COOKIE_SHA1
/// always goes step by step).
pub(crate) fn authenticate(transport: &mut Transport, mode: Mode) -> Result<Authenticated, Error> {
    let mut to_send = Vec::new();
    let mut client = if transport.stream.is_unix() {
        SaslClient::start(sasl::current_uid(), mode, true, &mut to_send)
    } else {
        // tcp: prove who we are with our keyring, as libdbus does.
        let responder = sasl::CookieResponder(Box::new(|challenge: &str| {
            crate::cookie::answer(
                &crate::cookie::home()?,
                challenge,
                &crate::cookie::challenge()?,
            )
        }));
        SaslClient::start_cookie_sha1(sasl::current_uid(), responder, &mut to_send)
    };
    loop {
        if !to_send.is_empty() {
            transport.write_all(&[&to_send], &[])?;
            to_send.clear();
        }
        let progress = client
            .feed(transport.input(), &mut to_send)
            .map_err(|e| Error::Auth(e.to_string()))?;
        match progress {
            Progress::Done { consumed, outcome } => {
                // Step by step, BEGIN is still to go.
                if !to_send.is_empty() {
                    transport.write_all(&[&to_send], &[])?;
                }
                // Whatever follows is the start of the message stream.
                transport.consume(consumed);
                return Ok(outcome);
            }
            Progress::NeedMore { consumed } => {
                transport.consume(consumed);
                // An answer to send (a DBUS_COOKIE_SHA1 challenge) goes
                // out before we wait for more.
                if to_send.is_empty() {
                    transport.read_more(0)?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    /// A fake server that checks what the client sends and answers with
    /// `replies`, delivered in small pieces to exercise partial reads.
    fn run_against(replies: &'static [u8]) -> (Result<Authenticated, Error>, Transport) {
        let (client, mut server) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let expected = sasl::pipelined_external(sasl::current_uid(), true);
            let mut got = vec![0u8; expected.len()];
            server.read_exact(&mut got).unwrap();
            assert_eq!(got, expected);
            for piece in replies.chunks(5) {
                server.write_all(piece).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            server
        });
        let mut transport = Transport::new(crate::socket::Socket::Unix(client)).unwrap();
        let result = authenticate(&mut transport, Mode::Pipelined);
        let _server = server.join().unwrap();
        (result, transport)
    }

    #[test]
    fn bytes_after_the_last_reply_stay_for_the_message_stream() {
        let (result, transport) =
            run_against(b"OK 0123456789abcdef0123456789abcdef\r\nAGREE_UNIX_FD\r\nl\x02");
        let outcome = result.unwrap();
        assert_eq!(outcome.guid, "0123456789abcdef0123456789abcdef");
        assert!(outcome.unix_fd);
        // "\r\nl\x02" is one write, so it arrives in one read.
        assert_eq!(transport.input(), b"l\x02");
    }

    /// Reads one `\r\n`-ended line (after the leading NUL for the first).
    fn read_line(server: &mut UnixStream) -> String {
        let mut line = Vec::new();
        let mut byte = [0u8];
        while !line.ends_with(b"\r\n") {
            server.read_exact(&mut byte).unwrap();
            line.push(byte[0]);
        }
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn step_by_step_sends_each_command_only_after_the_answer_to_the_last() {
        let (client, mut server) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for answer in [
                "OK 0123456789abcdef0123456789abcdef\r\n",
                "AGREE_UNIX_FD\r\n",
                "",
            ] {
                seen.push(read_line(&mut server));
                // Nothing more may have come before this answer.
                server.set_nonblocking(true).unwrap();
                let early = server.read(&mut [0u8; 64]);
                assert!(
                    early.is_err(),
                    "sent before the answer: {early:?} after {seen:?}"
                );
                server.set_nonblocking(false).unwrap();
                server.write_all(answer.as_bytes()).unwrap();
            }
            seen
        });
        let mut transport = Transport::new(crate::socket::Socket::Unix(client)).unwrap();
        let outcome = authenticate(&mut transport, Mode::StepByStep).unwrap();
        assert!(outcome.unix_fd);
        let seen = server.join().unwrap();
        assert_eq!(seen[1..], ["NEGOTIATE_UNIX_FD\r\n", "BEGIN\r\n"]);
        assert!(seen[0].starts_with("\0AUTH EXTERNAL "), "{seen:?}");
    }

    #[test]
    fn refused_fd_passing_is_not_an_error() {
        let (result, _) = run_against(b"OK 00ff\r\nERROR\r\n");
        assert!(!result.unwrap().unix_fd);
    }

    #[test]
    fn rejection_is_an_auth_error() {
        let (result, _) = run_against(b"REJECTED ANONYMOUS\r\n");
        match result {
            Err(Error::Auth(reason)) => assert!(reason.contains("ANONYMOUS"), "{reason}"),
            other => panic!("{:?}", other.map(|o| o.guid)),
        }
    }
}
