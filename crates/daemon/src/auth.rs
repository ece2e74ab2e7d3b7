//! The server side of D-Bus authentication (the SASL profile of the spec's
//! "Authentication Protocol"), sans-I/O: bytes in, reply lines out.
//!
//! Behaviour follows dbus-daemon: the same states (waiting for AUTH, for
//! DATA, for BEGIN), the same replies to each command in each state, six
//! rejections before disconnecting, and 16 KiB at most buffered for a line.
//! Differences, on purpose:
//! - DBUS_COOKIE_SHA1 is offered only where the daemon's own keyring
//!   directory can be found ([`keyring`]); like dbus-daemon it only ever
//!   authenticates the user the daemon runs as.
//! - ANONYMOUS is only offered when the configuration allows anonymous
//!   peers, rather than accepted and then disconnected.
//! - (Not a difference: EXTERNAL identities must be numeric uids, as in
//!   dbus-daemon, read as libdbus reads them: [`numeric_uid`].)
//! - At most [`MAX_AUTH_LINES`] lines per connection, so a peer that never
//!   reads cannot make us queue unbounded ERROR replies.

mod command;
pub mod keyring;
mod numeric_uid;
#[cfg(test)]
mod tests;

use command::Command;
use keyring::Keyring;
use sha1::{Digest, Sha1};

/// Longest line, `\r\n` included (dbus-daemon's bound on its whole auth
/// input buffer).
pub const MAX_LINE_LEN: usize = 16 * 1024;
/// Rejections after which the peer is disconnected (dbus-daemon's value).
pub const MAX_FAILURES: u32 = 6;
/// Lines a peer may send before BEGIN. Real clients send fewer than ten.
pub const MAX_AUTH_LINES: u32 = 1000;

/// A SASL mechanism this server implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    External,
    CookieSha1,
    Anonymous,
}

impl Mechanism {
    /// Every mechanism, in the order REJECTED lists them (dbus-daemon's).
    pub const ALL: [Mechanism; 3] = [
        Mechanism::External,
        Mechanism::CookieSha1,
        Mechanism::Anonymous,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::External => "EXTERNAL",
            Mechanism::CookieSha1 => "DBUS_COOKIE_SHA1",
            Mechanism::Anonymous => "ANONYMOUS",
        }
    }

    /// `None` for names we do not implement.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The configuration's `<auth>` names checked at start-up, as dbus-daemon
/// does: a name it does not implement stops the bus from starting, in
/// dbus-daemon's words.
pub fn check_mechanism_names(names: &[String]) -> Result<(), String> {
    match names.iter().find(|n| Mechanism::from_name(n).is_none()) {
        None => Ok(()),
        Some(unknown) => {
            let supported: Vec<&str> = Mechanism::ALL.iter().map(|m| m.name()).collect();
            Err(format!(
                "Unsupported auth mechanism \"{unknown}\" in bus config file detected. \
                 Supported mechanisms are \"{}\".",
                supported.join(", ")
            ))
        }
    }
}

/// What the daemon's configuration says about authentication.
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// The mechanisms peers may use. Filled from the `<auth>` elements, or
    /// with every mechanism we have when there are none; empty offers
    /// nothing, so nobody can connect.
    pub mechanisms: Vec<Mechanism>,
    /// `<allow_anonymous/>`: without it ANONYMOUS is never offered.
    pub allow_anonymous: bool,
    /// The server GUID sent with OK (32 hex digits).
    pub guid: String,
    /// Whether the transport can carry fds (true for unix sockets).
    pub unix_fd_supported: bool,
    /// The daemon user's DBUS_COOKIE_SHA1 keyring; without one that
    /// mechanism is not offered.
    pub keyring: Option<Keyring>,
}

impl AuthConfig {
    /// Every mechanism, anonymous peers refused, fd passing supported.
    pub fn new(guid: impl Into<String>) -> AuthConfig {
        AuthConfig {
            mechanisms: Mechanism::ALL.to_vec(),
            allow_anonymous: false,
            guid: guid.into(),
            unix_fd_supported: true,
            keyring: None,
        }
    }

    /// Build from the config file's `<auth>` names (none: every mechanism).
    /// Start-up refuses names we do not implement
    /// ([`check_mechanism_names`]); here they are dropped.
    pub fn from_config(
        auth: impl IntoIterator<Item = impl AsRef<str>>,
        allow_anonymous: bool,
        guid: impl Into<String>,
    ) -> AuthConfig {
        let mut names = auth.into_iter().peekable();
        let mechanisms = if names.peek().is_none() {
            Mechanism::ALL.to_vec()
        } else {
            let mut listed = Vec::new();
            for m in names.filter_map(|name| Mechanism::from_name(name.as_ref())) {
                if !listed.contains(&m) {
                    listed.push(m);
                }
            }
            listed
        };
        let keyring = if mechanisms.contains(&Mechanism::CookieSha1) {
            Keyring::of_current_user()
        } else {
            None
        };
        AuthConfig {
            mechanisms,
            allow_anonymous,
            keyring,
            ..AuthConfig::new(guid)
        }
    }

    fn offers(&self, mechanism: Mechanism) -> bool {
        let listed = self.mechanisms.contains(&mechanism);
        match mechanism {
            Mechanism::External => listed,
            Mechanism::CookieSha1 => listed && self.keyring.is_some(),
            Mechanism::Anonymous => listed && self.allow_anonymous,
        }
    }
}

/// Who the peer proved to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AuthIdentity {
    /// EXTERNAL: the uid, always equal to the socket's `SO_PEERCRED` uid;
    /// DBUS_COOKIE_SHA1: the uid the daemon runs as.
    Uid(u32),
    /// ANONYMOUS: no identity at all.
    Anonymous,
}

/// Where a [`SaslServer::feed`] call left the conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthProgress {
    /// `consumed` bytes were used; keep the rest and feed it again with
    /// whatever arrives next.
    NeedMore { consumed: usize },
    /// BEGIN was received: `consumed` bytes ended with its `\r\n` and the
    /// bytes after them are the D-Bus message stream.
    Begin { consumed: usize },
}

/// Why the connection must be dropped. The daemon logs this and closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("first byte was {0:#04x}, not the credentials nul byte")]
    MissingNulByte(u8),
    #[error("authentication line longer than {MAX_LINE_LEN} bytes")]
    LineTooLong,
    #[error("rejected {MAX_FAILURES} times")]
    TooManyFailures,
    #[error("more than {MAX_AUTH_LINES} authentication lines")]
    TooManyLines,
    #[error("BEGIN before authentication succeeded")]
    BeginBeforeOk,
}

/// The conversation states of the spec's server state diagram.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum State {
    /// Nothing read yet: the next byte must be the credentials nul.
    WaitingForNul,
    WaitingForAuth,
    /// EXTERNAL came without an initial response; we sent an empty DATA
    /// challenge and wait for the identity (or an empty DATA: "use my
    /// socket credentials").
    WaitingForExternalData,
    /// DBUS_COOKIE_SHA1: we sent our challenge for cookie `cookie_id` and
    /// wait for the client's challenge and hash.
    WaitingForCookieHash {
        cookie_id: u32,
        challenge: String,
    },
    /// OK sent; NEGOTIATE_UNIX_FD or BEGIN may follow.
    WaitingForBegin,
    Begun,
}

/// One connection's side of the conversation.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SaslServer {
    state: State,
    offer_external: bool,
    offer_anonymous: bool,
    keyring: Option<Keyring>,
    unix_fd_supported: bool,
    guid: String,
    /// The kernel's word on the peer's uid; None over tcp, where EXTERNAL
    /// therefore always fails (as in dbus-daemon).
    peer_uid: Option<u32>,
    identity: Option<AuthIdentity>,
    unix_fd_negotiated: bool,
    failures: u32,
    lines: u32,
}

/// What handling one line led to.
enum Step {
    Continue,
    Begin,
}

impl SaslServer {
    /// `peer_uid` comes from the kernel (`SO_PEERCRED`), never from the
    /// peer; None when the transport cannot tell (tcp).
    pub fn new(cfg: &AuthConfig, peer_uid: Option<u32>) -> SaslServer {
        SaslServer {
            state: State::WaitingForNul,
            offer_external: cfg.offers(Mechanism::External),
            offer_anonymous: cfg.offers(Mechanism::Anonymous),
            keyring: cfg
                .keyring
                .clone()
                .filter(|_| cfg.offers(Mechanism::CookieSha1)),
            unix_fd_supported: cfg.unix_fd_supported,
            guid: cfg.guid.clone(),
            peer_uid,
            identity: None,
            unix_fd_negotiated: false,
            failures: 0,
            lines: 0,
        }
    }

    /// Feed the bytes received and not yet consumed (the unconsumed tail of
    /// the previous call first, then new bytes). Reply lines are appended to
    /// `out`. Only whole lines are consumed, and nothing after BEGIN's line.
    /// After `Begin`, further calls consume nothing and return `Begin`.
    /// On an error `out` still holds the replies to send before closing
    /// (dbus-daemon says the sixth REJECTED, then disconnects).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<AuthProgress, AuthError> {
        let mut pos = 0;
        match self.state {
            State::Begun => return Ok(AuthProgress::Begin { consumed: 0 }),
            State::WaitingForNul => match input.first() {
                None => return Ok(AuthProgress::NeedMore { consumed: 0 }),
                Some(0) => {
                    pos = 1;
                    self.state = State::WaitingForAuth;
                }
                Some(&other) => return Err(AuthError::MissingNulByte(other)),
            },
            _ => {}
        }
        loop {
            let rest = &input[pos..];
            // A line that fits ends within the first MAX_LINE_LEN bytes, so
            // looking further (into a big pipelined message, say) is useless.
            let Some(end) = find_line_end(&rest[..rest.len().min(MAX_LINE_LEN)]) else {
                if rest.len() >= MAX_LINE_LEN {
                    return Err(AuthError::LineTooLong);
                }
                return Ok(AuthProgress::NeedMore { consumed: pos });
            };
            // Saturating: a restart hands the count over, and one at the
            // top must end the exchange, not overflow.
            self.lines = self.lines.saturating_add(1);
            if self.lines > MAX_AUTH_LINES {
                return Err(AuthError::TooManyLines);
            }
            pos += end + 2;
            if let Step::Begin = self.handle_line(&rest[..end], out)? {
                self.state = State::Begun;
                return Ok(AuthProgress::Begin { consumed: pos });
            }
        }
    }

    /// Whether the peer asked for fd passing and we agreed.
    pub fn unix_fd_negotiated(&self) -> bool {
        self.unix_fd_negotiated
    }

    /// The identity accepted by the last OK, unless the peer cancelled since.
    pub fn authenticated(&self) -> Option<AuthIdentity> {
        self.identity
    }

    fn handle_line(&mut self, line: &[u8], out: &mut Vec<u8>) -> Result<Step, AuthError> {
        let Ok(command) = command::parse(line) else {
            send_error(out, "Command contained non-ASCII");
            return Ok(Step::Continue);
        };
        match self.state {
            State::WaitingForAuth => self.waiting_for_auth(command, out),
            State::WaitingForExternalData => self.waiting_for_external_data(command, out),
            State::WaitingForCookieHash { .. } => self.waiting_for_cookie_hash(command, out),
            State::WaitingForBegin => self.waiting_for_begin(command, out),
            // feed() never calls us in these states.
            State::WaitingForNul | State::Begun => Ok(Step::Continue),
        }
    }

    fn waiting_for_auth(&mut self, command: Command, out: &mut Vec<u8>) -> Result<Step, AuthError> {
        match command {
            Command::Auth {
                mechanism: None, ..
            } => self.reject(out)?,
            Command::Auth {
                mechanism: Some(name),
                initial_response,
            } => match self.offered(name) {
                Some(mechanism) => self.start(mechanism, initial_response, out)?,
                None => self.reject(out)?,
            },
            Command::Cancel | Command::Data(_) => {
                send_error(out, "Not currently in an auth conversation")
            }
            Command::Begin => return Err(AuthError::BeginBeforeOk),
            Command::Error => self.reject(out)?,
            Command::NegotiateUnixFd => send_error(out, "Need to authenticate first"),
            Command::Unknown => send_error(out, "Unknown command"),
        }
        Ok(Step::Continue)
    }

    fn waiting_for_external_data(
        &mut self,
        command: Command,
        out: &mut Vec<u8>,
    ) -> Result<Step, AuthError> {
        match command {
            Command::Auth { .. } => send_error(out, "Sent AUTH while another AUTH in progress"),
            Command::Cancel | Command::Error => self.reject(out)?,
            Command::Data(hex) => match command::decode_hex(hex) {
                None => send_error(out, "Invalid hex encoding"),
                // The answer to our empty challenge: "use my credentials".
                Some(identity) if identity.is_empty() => match self.peer_uid {
                    Some(uid) => self.accept_external(uid, out),
                    None => self.reject(out)?,
                },
                Some(identity) => self.external_identity(&identity, out)?,
            },
            Command::Begin => return Err(AuthError::BeginBeforeOk),
            Command::NegotiateUnixFd => send_error(out, "Need to authenticate first"),
            Command::Unknown => send_error(out, "Unknown command"),
        }
        Ok(Step::Continue)
    }

    fn waiting_for_cookie_hash(
        &mut self,
        command: Command,
        out: &mut Vec<u8>,
    ) -> Result<Step, AuthError> {
        match command {
            Command::Auth { .. } => send_error(out, "Sent AUTH while another AUTH in progress"),
            Command::Cancel | Command::Error => self.reject(out)?,
            Command::Data(hex) => match command::decode_hex(hex) {
                None => send_error(out, "Invalid hex encoding"),
                Some(response) => self.cookie_response(&response, out)?,
            },
            Command::Begin => return Err(AuthError::BeginBeforeOk),
            Command::NegotiateUnixFd => send_error(out, "Need to authenticate first"),
            Command::Unknown => send_error(out, "Unknown command"),
        }
        Ok(Step::Continue)
    }

    /// DBUS_COOKIE_SHA1's first step: the client names the user it is
    /// (a name or a uid). Only the daemon's own user can be proven (as in
    /// dbus-daemon: another user's home is theirs to booby-trap); we answer
    /// with the context, a cookie id and our challenge.
    fn cookie_start(&mut self, identity: &[u8], out: &mut Vec<u8>) -> Result<(), AuthError> {
        let Some(keyring) = &self.keyring else {
            return self.reject(out);
        };
        let names_us = std::str::from_utf8(identity).is_ok_and(|id| keyring.names_owner(id));
        if !names_us {
            return self.reject(out);
        }
        let (cookie, challenge) = match (keyring.best(), keyring::random_bytes::<16>()) {
            (Ok(cookie), Ok(challenge)) => (cookie, keyring::hex(&challenge)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!("DBUS_COOKIE_SHA1 unavailable: {e}");
                return self.reject(out);
            }
        };
        let data = format!("{} {} {challenge}", keyring::CONTEXT, cookie.id);
        out.extend_from_slice(b"DATA ");
        out.extend_from_slice(keyring::hex(data.as_bytes()).as_bytes());
        out.extend_from_slice(b"\r\n");
        self.state = State::WaitingForCookieHash {
            cookie_id: cookie.id,
            challenge,
        };
        Ok(())
    }

    /// DBUS_COOKIE_SHA1's second step: "<client challenge> <hash>", the
    /// hash being the hex SHA-1 of "<our challenge>:<client
    /// challenge>:<cookie>".
    fn cookie_response(&mut self, response: &[u8], out: &mut Vec<u8>) -> Result<(), AuthError> {
        let State::WaitingForCookieHash {
            cookie_id,
            challenge,
        } = self.state.clone()
        else {
            return self.reject(out);
        };
        let text = String::from_utf8_lossy(response);
        let Some((client_challenge, hash)) = text.split_once([' ', '\t']) else {
            return self.reject(out);
        };
        let hash = hash.trim_start_matches([' ', '\t']);
        let cookie = self.keyring.as_ref().and_then(|k| k.get(cookie_id));
        let (Some(cookie), Some(uid)) = (cookie, self.keyring.as_ref().map(Keyring::uid)) else {
            return self.reject(out);
        };
        if client_challenge.is_empty() || hash.is_empty() {
            return self.reject(out);
        }
        let expected = Sha1::digest(format!("{challenge}:{client_challenge}:{}", cookie.hex));
        if hash != keyring::hex(&expected) {
            return self.reject(out);
        }
        self.accept(AuthIdentity::Uid(uid), out);
        Ok(())
    }

    fn waiting_for_begin(
        &mut self,
        command: Command,
        out: &mut Vec<u8>,
    ) -> Result<Step, AuthError> {
        match command {
            Command::Begin => return Ok(Step::Begin),
            Command::NegotiateUnixFd if self.unix_fd_supported => {
                self.unix_fd_negotiated = true;
                out.extend_from_slice(b"AGREE_UNIX_FD\r\n");
            }
            Command::NegotiateUnixFd => send_error(
                out,
                "Unix FD passing not supported, not authenticated or otherwise not possible",
            ),
            Command::Auth { .. } => send_error(out, "Sent AUTH while expecting BEGIN"),
            Command::Data(_) => send_error(out, "Sent DATA while expecting BEGIN"),
            // Back to square one: the OK no longer holds.
            Command::Cancel | Command::Error => self.reject(out)?,
            Command::Unknown => send_error(out, "Unknown command"),
        }
        Ok(Step::Continue)
    }

    /// The mechanism the peer named, if we offer it.
    fn offered(&self, name: &str) -> Option<Mechanism> {
        Mechanism::from_name(name).filter(|&m| self.offers(m))
    }

    fn offers(&self, mechanism: Mechanism) -> bool {
        match mechanism {
            Mechanism::External => self.offer_external,
            Mechanism::CookieSha1 => self.keyring.is_some(),
            Mechanism::Anonymous => self.offer_anonymous,
        }
    }

    /// Run `mechanism` on the AUTH command's initial response.
    fn start(
        &mut self,
        mechanism: Mechanism,
        initial_response: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), AuthError> {
        let Some(response) = command::decode_hex(initial_response) else {
            send_error(out, "Invalid hex encoding");
            return Ok(());
        };
        match mechanism {
            Mechanism::External if response.is_empty() => {
                // No identity given: ask for one with an empty challenge.
                out.extend_from_slice(b"DATA\r\n");
                self.state = State::WaitingForExternalData;
                Ok(())
            }
            Mechanism::External => self.external_identity(&response, out),
            Mechanism::CookieSha1 => self.cookie_start(&response, out),
            // The optional "trace" text must be UTF-8 without NULs (libdbus's
            // UTF-8 check refuses NUL too); it means nothing.
            Mechanism::Anonymous
                if std::str::from_utf8(&response).is_err() || response.contains(&0) =>
            {
                self.reject(out)
            }
            Mechanism::Anonymous => {
                self.accept(AuthIdentity::Anonymous, out);
                Ok(())
            }
        }
    }

    /// EXTERNAL with an authorization identity: it must name the very uid
    /// the kernel reported for the socket.
    fn external_identity(&mut self, identity: &[u8], out: &mut Vec<u8>) -> Result<(), AuthError> {
        match parse_uid(identity) {
            Some(uid) if Some(uid) == self.peer_uid => {
                self.accept_external(uid, out);
                Ok(())
            }
            _ => self.reject(out),
        }
    }

    fn accept_external(&mut self, uid: u32, out: &mut Vec<u8>) {
        self.accept(AuthIdentity::Uid(uid), out);
    }

    fn accept(&mut self, identity: AuthIdentity, out: &mut Vec<u8>) {
        self.identity = Some(identity);
        self.state = State::WaitingForBegin;
        out.extend_from_slice(b"OK ");
        out.extend_from_slice(self.guid.as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    /// Send REJECTED with our mechanisms and go back to waiting for AUTH;
    /// the MAX_FAILURES-th rejection ends the connection.
    fn reject(&mut self, out: &mut Vec<u8>) -> Result<(), AuthError> {
        out.extend_from_slice(b"REJECTED");
        for mechanism in Mechanism::ALL {
            if self.offers(mechanism) {
                out.push(b' ');
                out.extend_from_slice(mechanism.name().as_bytes());
            }
        }
        out.extend_from_slice(b"\r\n");
        self.identity = None;
        self.state = State::WaitingForAuth;
        self.failures = self.failures.saturating_add(1);
        if self.failures >= MAX_FAILURES {
            return Err(AuthError::TooManyFailures);
        }
        Ok(())
    }
}

/// Position of the first `\r\n` in `bytes`.
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|pair| pair == b"\r\n")
}

/// An authorization identity that is a numeric uid, spelled in any way
/// libdbus reads one ([`numeric_uid`]). `u32::MAX` is `(uid_t) -1`, which
/// names no user.
fn parse_uid(identity: &[u8]) -> Option<u32> {
    let uid = u32::try_from(numeric_uid::parse(identity)?).ok()?;
    (uid != u32::MAX).then_some(uid)
}

/// dbus-daemon quotes its error explanations.
fn send_error(out: &mut Vec<u8>, explanation: &str) {
    out.extend_from_slice(b"ERROR \"");
    out.extend_from_slice(explanation.as_bytes());
    out.extend_from_slice(b"\"\r\n");
}
