//! The client side of D-Bus authentication, sans-I/O: the bytes to send for
//! EXTERNAL with our uid, and a parser of the server's replies that says
//! when the message stream starts, with the server's GUID and whether fd
//! passing was agreed.
//!
//! Two ways to talk:
//! - pipelined: everything (`\0AUTH EXTERNAL <hex uid>`, `NEGOTIATE_UNIX_FD`,
//!   `BEGIN`) is sent at once, then the replies are read; one round trip,
//!   as sd-bus does. Any server that follows the spec copes with it.
//! - step by step: each command waits for the previous reply, as libdbus
//!   does.
//!
//! ```
//! use quickbus_client::sasl::{Mode, SaslClient, Progress};
//! let mut to_send = Vec::new();
//! let mut sasl = SaslClient::start(1000, Mode::Pipelined, true, &mut to_send);
//! assert_eq!(to_send, b"\0AUTH EXTERNAL 31303030\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n");
//! let reply = b"OK 0123456789abcdef0123456789abcdef\r\nAGREE_UNIX_FD\r\n";
//! let Progress::Done { consumed, outcome } = sasl.feed(reply, &mut to_send)? else {
//!     unreachable!()
//! };
//! assert_eq!(consumed, reply.len());
//! assert!(outcome.unix_fd);
//! # Ok::<(), quickbus_client::sasl::SaslError>(())
//! ```

/// Longest server line we wait for, `\r\n` included.
pub const MAX_LINE_LEN: usize = 16 * 1024;

/// The uid of this process, for [`SaslClient::start`].
pub fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The whole pipelined EXTERNAL exchange from the client's side.
pub fn pipelined_external(uid: u32, negotiate_unix_fd: bool) -> Vec<u8> {
    let mut out = Vec::new();
    SaslClient::start(uid, Mode::Pipelined, negotiate_unix_fd, &mut out);
    out
}

/// How commands are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// All commands up front, replies read afterwards.
    Pipelined,
    /// Each command after the reply to the previous one.
    StepByStep,
}

/// What a successful exchange established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authenticated {
    /// The server's GUID from its OK line (hex).
    pub guid: String,
    /// Whether the server agreed to fd passing.
    pub unix_fd: bool,
}

/// Where a [`SaslClient::feed`] call left the exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// `consumed` bytes were used; keep the rest for the next call.
    NeedMore { consumed: usize },
    /// Authentication is over: the bytes after `consumed` are messages.
    Done {
        consumed: usize,
        outcome: Authenticated,
    },
}

/// Why authentication failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    #[error("server rejected {mechanism} authentication (it offers: {offers:?})")]
    Rejected {
        mechanism: &'static str,
        offers: String,
    },
    #[error("server answered AUTH with an error: {0:?}")]
    ServerError(String),
    #[error("unexpected reply from server: {0:?}")]
    UnexpectedReply(String),
    #[error("server sent an invalid GUID: {0:?}")]
    BadGuid(String),
    #[error("server sent a line longer than {MAX_LINE_LEN} bytes")]
    LineTooLong,
    #[error("server sent a line that is not ASCII")]
    NotAscii,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    WaitingForOk,
    WaitingForAgreeUnixFd { guid: String },
    Done(Authenticated),
}

/// How to answer a DBUS_COOKIE_SHA1 challenge.
pub type AnswerChallenge = dyn FnMut(&str) -> Option<String>;

/// Answers a DBUS_COOKIE_SHA1 challenge (the server's DATA, hex-decoded)
/// with our response, or None when we cannot.
pub struct CookieResponder(pub Box<AnswerChallenge>);

impl std::fmt::Debug for CookieResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieResponder")
    }
}

/// The client side of one exchange, for the EXTERNAL mechanism, or where
/// the transport has no credentials to offer (tcp) DBUS_COOKIE_SHA1 then
/// ANONYMOUS if the server offers it.
#[derive(Debug)]
pub struct SaslClient {
    mechanism: &'static str,
    mode: Mode,
    negotiate_unix_fd: bool,
    state: State,
    /// DBUS_COOKIE_SHA1 in progress: how to answer its challenge.
    cookie: Option<CookieResponder>,
    /// After a rejection, try ANONYMOUS if the server lists it.
    anonymous_fallback: bool,
}

impl SaslClient {
    /// Begin authenticating as `uid`: the bytes to send now are appended to
    /// `out` (starting with the credentials nul byte).
    pub fn start(uid: u32, mode: Mode, negotiate_unix_fd: bool, out: &mut Vec<u8>) -> SaslClient {
        out.extend_from_slice(b"\0AUTH EXTERNAL ");
        // The authorization identity is the uid in ASCII decimal, hex-encoded.
        for digit in uid.to_string().bytes() {
            out.extend_from_slice(format!("{digit:02x}").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        SaslClient::then(mode, negotiate_unix_fd, "EXTERNAL", out)
    }

    /// Begin authenticating with ANONYMOUS (no identity, no fds: what a
    /// tcp connection can do when the server allows anonymous peers).
    pub fn start_anonymous(mode: Mode, out: &mut Vec<u8>) -> SaslClient {
        out.push(0);
        SaslClient::then(mode, false, "ANONYMOUS", out).anonymous(out)
    }

    /// Begin with DBUS_COOKIE_SHA1 as `uid` (what libdbus and GDBus use
    /// over tcp), falling back on ANONYMOUS when the server rejects it and
    /// offers that. Step by step: the challenge needs an answer.
    pub fn start_cookie_sha1(
        uid: u32,
        responder: CookieResponder,
        out: &mut Vec<u8>,
    ) -> SaslClient {
        out.extend_from_slice(b"\0AUTH DBUS_COOKIE_SHA1 ");
        out.extend_from_slice(hex(uid.to_string().as_bytes()).as_bytes());
        out.extend_from_slice(b"\r\n");
        let mut client = SaslClient::then(Mode::StepByStep, false, "DBUS_COOKIE_SHA1", out);
        client.cookie = Some(responder);
        client.anonymous_fallback = true;
        client
    }

    /// Send AUTH ANONYMOUS (and, pipelined, BEGIN).
    fn anonymous(mut self, out: &mut Vec<u8>) -> SaslClient {
        // The optional trace text, hex-encoded: "quickbus".
        out.extend_from_slice(b"AUTH ANONYMOUS 717569636b627573\r\n");
        if self.mode == Mode::Pipelined {
            out.extend_from_slice(b"BEGIN\r\n");
        }
        self.mechanism = "ANONYMOUS";
        self.cookie = None;
        self.anonymous_fallback = false;
        self
    }

    /// What follows AUTH: in pipelined mode, the rest at once.
    fn then(
        mode: Mode,
        negotiate_unix_fd: bool,
        mechanism: &'static str,
        out: &mut Vec<u8>,
    ) -> SaslClient {
        // (ANONYMOUS writes its own AUTH, then its BEGIN.)
        if mode == Mode::Pipelined && mechanism != "ANONYMOUS" {
            if negotiate_unix_fd {
                out.extend_from_slice(b"NEGOTIATE_UNIX_FD\r\n");
            }
            out.extend_from_slice(b"BEGIN\r\n");
        }
        SaslClient {
            mechanism,
            mode,
            negotiate_unix_fd,
            state: State::WaitingForOk,
            cookie: None,
            anonymous_fallback: false,
        }
    }

    /// Feed the bytes received and not yet consumed (the unconsumed tail of
    /// the previous call first). Commands to send next (step-by-step mode
    /// only) are appended to `out`. Nothing after the last reply line is
    /// consumed: the server may send its first message right behind it.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Progress, SaslError> {
        let mut pos = 0;
        loop {
            if let State::Done(outcome) = &self.state {
                return Ok(Progress::Done {
                    consumed: pos,
                    outcome: outcome.clone(),
                });
            }
            let rest = &input[pos..];
            let Some(end) = rest.windows(2).position(|pair| pair == b"\r\n") else {
                if rest.len() > MAX_LINE_LEN {
                    return Err(SaslError::LineTooLong);
                }
                return Ok(Progress::NeedMore { consumed: pos });
            };
            if end + 2 > MAX_LINE_LEN {
                return Err(SaslError::LineTooLong);
            }
            let line = &rest[..end];
            if !line.is_ascii() || line.contains(&0) {
                return Err(SaslError::NotAscii);
            }
            // ASCII was just checked, so this is lossless.
            let line = String::from_utf8_lossy(line);
            self.handle_line(&line, out)?;
            pos += end + 2;
        }
    }

    fn handle_line(&mut self, line: &str, out: &mut Vec<u8>) -> Result<(), SaslError> {
        let (command, args) = line.split_once(' ').unwrap_or((line, ""));
        match (&self.state, command) {
            (State::WaitingForOk, "OK") => {
                let guid = args.trim_matches(|c| c == ' ' || c == '\t');
                if !is_guid(guid) {
                    return Err(SaslError::BadGuid(guid.to_owned()));
                }
                let guid = guid.to_owned();
                if self.negotiate_unix_fd {
                    if self.mode == Mode::StepByStep {
                        out.extend_from_slice(b"NEGOTIATE_UNIX_FD\r\n");
                    }
                    self.state = State::WaitingForAgreeUnixFd { guid };
                } else {
                    self.finish(guid, false, out);
                }
                Ok(())
            }
            (State::WaitingForOk, "DATA") if self.cookie.is_some() => {
                let challenge = decode_hex(args).map(|d| String::from_utf8_lossy(&d).into_owned());
                let answer = match (challenge, &mut self.cookie) {
                    (Some(challenge), Some(responder)) => (responder.0)(&challenge),
                    _ => None,
                };
                match answer {
                    Some(answer) => {
                        out.extend_from_slice(b"DATA ");
                        out.extend_from_slice(hex(answer.as_bytes()).as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    // The server then rejects us, and we may fall back.
                    None => out.extend_from_slice(b"CANCEL\r\n"),
                }
                Ok(())
            }
            (State::WaitingForOk, "REJECTED")
                if self.anonymous_fallback && args.split(' ').any(|m| m == "ANONYMOUS") =>
            {
                let client = std::mem::replace(
                    self,
                    SaslClient::then(self.mode, false, "ANONYMOUS", &mut Vec::new()),
                );
                *self = client.anonymous(out);
                Ok(())
            }
            (State::WaitingForOk, "REJECTED") => Err(SaslError::Rejected {
                mechanism: self.mechanism,
                offers: args.to_owned(),
            }),
            (State::WaitingForOk, "ERROR") => Err(SaslError::ServerError(args.to_owned())),
            (State::WaitingForAgreeUnixFd { guid }, "AGREE_UNIX_FD") => {
                let guid = guid.clone();
                self.finish(guid, true, out);
                Ok(())
            }
            // The server cannot or will not pass fds; we go on without.
            (State::WaitingForAgreeUnixFd { guid }, "ERROR") => {
                let guid = guid.clone();
                self.finish(guid, false, out);
                Ok(())
            }
            _ => Err(SaslError::UnexpectedReply(line.to_owned())),
        }
    }

    fn finish(&mut self, guid: String, unix_fd: bool, out: &mut Vec<u8>) {
        if self.mode == Mode::StepByStep {
            out.extend_from_slice(b"BEGIN\r\n");
        }
        self.state = State::Done(Authenticated { guid, unix_fd });
    }
}

/// `bytes` as lowercase hex, as SASL lines carry data.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex text (either case, whole bytes only) decoded; None if it is not.
pub fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What libdbus accepts as a GUID: non-empty hex that decodes to bytes.
fn is_guid(text: &str) -> bool {
    let whole_bytes = text.as_bytes().chunks_exact(2).remainder().is_empty();
    !text.is_empty() && whole_bytes && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUID: &str = "0123456789abcdef0123456789abcdef";
    /// The server's OK line, as quickbus-daemon and dbus-daemon send it.
    const OK: &[u8] = b"OK 0123456789abcdef0123456789abcdef\r\n";
    /// The start of a message the server may send right after the replies.
    const MESSAGE: &[u8] = b"l\x02\x01\x01\x0b\x00\x00\x00\x01\x00\x00\x00=\x00\x00\x00";

    fn concat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn done(guid: &str, unix_fd: bool, consumed: usize) -> Progress {
        Progress::Done {
            consumed,
            outcome: Authenticated {
                guid: guid.into(),
                unix_fd,
            },
        }
    }

    #[test]
    fn pipelined_bytes_with_fds() {
        assert_eq!(
            pipelined_external(1000, true),
            b"\0AUTH EXTERNAL 31303030\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n"
        );
    }

    #[test]
    fn pipelined_bytes_without_fds() {
        assert_eq!(
            pipelined_external(0, false),
            b"\0AUTH EXTERNAL 30\r\nBEGIN\r\n"
        );
    }

    #[test]
    fn step_by_step_sends_only_auth_first() {
        let mut out = Vec::new();
        SaslClient::start(4294967294, Mode::StepByStep, true, &mut out);
        assert_eq!(out, b"\0AUTH EXTERNAL 34323934393637323934\r\n");
    }

    #[test]
    fn current_uid_is_the_process_uid() {
        assert_eq!(current_uid(), rustix::process::getuid().as_raw());
    }

    #[test]
    fn pipelined_replies_with_fds_agreed_stop_before_the_message() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, true, &mut out);
        out.clear();
        let input = concat(&[OK, b"AGREE_UNIX_FD\r\n", MESSAGE]);
        let progress = sasl.feed(&input, &mut out).unwrap();
        assert_eq!(progress, done(GUID, true, input.len() - MESSAGE.len()));
        assert!(out.is_empty(), "pipelined mode sends nothing more");
    }

    #[test]
    fn pipelined_replies_with_fds_refused() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, true, &mut out);
        let input = concat(&[OK, b"ERROR \"Unix FD passing not supported\"\r\n"]);
        let progress = sasl.feed(&input, &mut out).unwrap();
        assert_eq!(progress, done(GUID, false, input.len()));
    }

    #[test]
    fn pipelined_without_fds_is_done_after_ok() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, false, &mut out);
        let input = concat(&[OK, MESSAGE]);
        let progress = sasl.feed(&input, &mut out).unwrap();
        assert_eq!(progress, done(GUID, false, OK.len()));
    }

    #[test]
    fn replies_byte_at_a_time() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, true, &mut out);
        let input = concat(&[OK, b"AGREE_UNIX_FD\r\n", MESSAGE]);
        let mut buffer = Vec::new();
        let mut total = 0;
        let mut outcome = None;
        for &byte in &input {
            buffer.push(byte);
            match sasl.feed(&buffer, &mut out).unwrap() {
                Progress::NeedMore { consumed } => {
                    buffer.drain(..consumed);
                    total += consumed;
                }
                Progress::Done {
                    consumed,
                    outcome: o,
                } => {
                    total += consumed;
                    outcome = Some(o);
                    break;
                }
            }
        }
        assert_eq!(total, input.len() - MESSAGE.len());
        assert_eq!(
            outcome,
            Some(Authenticated {
                guid: GUID.into(),
                unix_fd: true
            })
        );
    }

    #[test]
    fn step_by_step_with_fds() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::StepByStep, true, &mut out);
        out.clear();
        assert_eq!(
            sasl.feed(OK, &mut out),
            Ok(Progress::NeedMore { consumed: OK.len() })
        );
        assert_eq!(out, b"NEGOTIATE_UNIX_FD\r\n");
        out.clear();
        assert_eq!(
            sasl.feed(b"AGREE_UNIX_FD\r\n", &mut out),
            Ok(done(GUID, true, 15))
        );
        assert_eq!(out, b"BEGIN\r\n");
    }

    #[test]
    fn step_by_step_with_fds_refused() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::StepByStep, true, &mut out);
        out.clear();
        sasl.feed(OK, &mut out).unwrap();
        out.clear();
        assert_eq!(sasl.feed(b"ERROR\r\n", &mut out), Ok(done(GUID, false, 7)));
        assert_eq!(out, b"BEGIN\r\n");
    }

    #[test]
    fn step_by_step_without_fds() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::StepByStep, false, &mut out);
        out.clear();
        assert_eq!(sasl.feed(OK, &mut out), Ok(done(GUID, false, OK.len())));
        assert_eq!(out, b"BEGIN\r\n");
    }

    #[test]
    fn feeding_after_done_consumes_nothing() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, false, &mut out);
        sasl.feed(OK, &mut out).unwrap();
        assert_eq!(sasl.feed(OK, &mut out), Ok(done(GUID, false, 0)));
    }

    #[test]
    fn rejection_reports_the_offered_mechanisms() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, true, &mut out);
        assert_eq!(
            sasl.feed(b"REJECTED EXTERNAL ANONYMOUS\r\n", &mut out),
            Err(SaslError::Rejected {
                mechanism: "EXTERNAL",
                offers: "EXTERNAL ANONYMOUS".into()
            })
        );
    }

    #[test]
    fn error_to_auth_is_a_failure() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::StepByStep, true, &mut out);
        assert_eq!(
            sasl.feed(b"ERROR \"Unknown command\"\r\n", &mut out),
            Err(SaslError::ServerError("\"Unknown command\"".into()))
        );
    }

    #[test]
    fn unexpected_replies_are_failures() {
        for input in [
            &b"DATA\r\n"[..],
            b"AGREE_UNIX_FD\r\n",
            b"BEGIN\r\n",
            b"\r\n",
        ] {
            let mut out = Vec::new();
            let mut sasl = SaslClient::start(1000, Mode::Pipelined, true, &mut out);
            assert!(
                matches!(
                    sasl.feed(input, &mut out),
                    Err(SaslError::UnexpectedReply(_))
                ),
                "{input:?}"
            );
        }
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, true, &mut out);
        let input = concat(&[OK, OK]);
        assert!(matches!(
            sasl.feed(&input, &mut out),
            Err(SaslError::UnexpectedReply(_))
        ));
    }

    #[test]
    fn bad_guids_are_refused() {
        for line in [&b"OK\r\n"[..], b"OK \r\n", b"OK xyz0\r\n", b"OK 123\r\n"] {
            let mut out = Vec::new();
            let mut sasl = SaslClient::start(1000, Mode::Pipelined, false, &mut out);
            assert!(
                matches!(sasl.feed(line, &mut out), Err(SaslError::BadGuid(_))),
                "{line:?}"
            );
        }
    }

    #[test]
    fn non_ascii_and_overlong_lines_are_refused() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, false, &mut out);
        assert_eq!(
            sasl.feed(b"OK \xff\r\n", &mut out),
            Err(SaslError::NotAscii)
        );
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, false, &mut out);
        let long = vec![b'O'; MAX_LINE_LEN + 1];
        assert_eq!(sasl.feed(&long, &mut out), Err(SaslError::LineTooLong));
        let mut terminated = vec![b'O'; MAX_LINE_LEN - 1];
        terminated.extend_from_slice(b"\r\n");
        assert_eq!(
            sasl.feed(&terminated, &mut out),
            Err(SaslError::LineTooLong)
        );
    }

    #[test]
    fn a_partial_line_is_left_unconsumed() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(1000, Mode::Pipelined, false, &mut out);
        assert_eq!(
            sasl.feed(&OK[..10], &mut out),
            Ok(Progress::NeedMore { consumed: 0 })
        );
    }

    #[test]
    fn anonymous_sends_no_identity_and_no_fd_negotiation() {
        let mut out = Vec::new();
        let mut sasl = SaslClient::start_anonymous(Mode::Pipelined, &mut out);
        assert_eq!(out, b"\0AUTH ANONYMOUS 717569636b627573\r\nBEGIN\r\n");
        let reply = format!("OK {GUID}\r\n");
        assert_eq!(
            sasl.feed(reply.as_bytes(), &mut out),
            Ok(done(GUID, false, reply.len()))
        );
        let mut refused = SaslClient::start_anonymous(Mode::Pipelined, &mut out);
        assert_eq!(
            refused.feed(b"REJECTED EXTERNAL\r\n", &mut out),
            Err(SaslError::Rejected {
                mechanism: "ANONYMOUS",
                offers: "EXTERNAL".into()
            })
        );
    }

    #[test]
    fn cookie_sha1_answers_the_challenge_then_begins() {
        let mut out = Vec::new();
        let responder = CookieResponder(Box::new(|challenge: &str| {
            assert_eq!(challenge, "ctx 1 srv");
            Some("cli hash".to_owned())
        }));
        let mut sasl = SaslClient::start_cookie_sha1(0, responder, &mut out);
        assert_eq!(out, b"\0AUTH DBUS_COOKIE_SHA1 30\r\n");
        out.clear();
        let data = format!("DATA {}\r\n", hex(b"ctx 1 srv"));
        sasl.feed(data.as_bytes(), &mut out).unwrap();
        assert_eq!(out, format!("DATA {}\r\n", hex(b"cli hash")).as_bytes());
        out.clear();
        let ok = format!("OK {GUID}\r\n");
        assert_eq!(
            sasl.feed(ok.as_bytes(), &mut out),
            Ok(done(GUID, false, ok.len()))
        );
        assert_eq!(out, b"BEGIN\r\n");
    }

    #[test]
    fn cookie_sha1_falls_back_on_anonymous_when_offered() {
        let mut out = Vec::new();
        let responder = CookieResponder(Box::new(|_: &str| None));
        let mut sasl = SaslClient::start_cookie_sha1(0, responder, &mut out);
        out.clear();
        sasl.feed(
            format!("DATA {}\r\n", hex(b"ctx 1 srv")).as_bytes(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"CANCEL\r\n");
        out.clear();
        sasl.feed(b"REJECTED DBUS_COOKIE_SHA1 ANONYMOUS\r\n", &mut out)
            .unwrap();
        assert_eq!(out, b"AUTH ANONYMOUS 717569636b627573\r\n");
        out.clear();
        let ok = format!("OK {GUID}\r\n");
        assert_eq!(
            sasl.feed(ok.as_bytes(), &mut out),
            Ok(done(GUID, false, ok.len()))
        );
        assert_eq!(out, b"BEGIN\r\n");
        // Without ANONYMOUS on offer, the rejection is final.
        let mut alone =
            SaslClient::start_cookie_sha1(0, CookieResponder(Box::new(|_: &str| None)), &mut out);
        assert!(matches!(
            alone.feed(b"REJECTED DBUS_COOKIE_SHA1\r\n", &mut out),
            Err(SaslError::Rejected {
                mechanism: "DBUS_COOKIE_SHA1",
                ..
            })
        ));
    }
}
