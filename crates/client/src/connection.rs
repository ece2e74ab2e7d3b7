//! A blocking connection to a message bus: connect, authenticate, Hello,
//! then send and receive messages.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quickbus_wire::{
    Message, MessageBuilder, MessageType, Value, BUS_INTERFACE, BUS_NAME, BUS_PATH,
};

use crate::error::{CallError, DBusError, Error};
use crate::sasl::Mode;
use crate::socket::Socket;
use crate::transport::Transport;

/// Where the system bus listens when DBUS_SYSTEM_BUS_ADDRESS is not set.
pub const DEFAULT_SYSTEM_BUS_ADDRESS: &str = "unix:path=/run/dbus/system_bus_socket";

/// A received message with the fds that came with it.
pub type Received = (Message, Vec<OwnedFd>);

pub struct Connection {
    transport: Transport,
    unique_name: String,
    server_guid: String,
    unix_fds: bool,
    last_serial: u32,
    /// Longest wait for a reply (each read is bounded by it too).
    timeout: Option<Duration>,
    /// Messages read while waiting for a reply, handed out by receive().
    pending: VecDeque<Received>,
}

impl Connection {
    /// Connect to the first address of a `;`-separated D-Bus address list
    /// that works, authenticate and say Hello.
    pub fn connect(address: &str) -> Result<Connection, Error> {
        let socket = crate::address::connect_any(address)?;
        Connection::from_socket(socket)
    }

    /// Connect with a read time-out applied from the very first byte, so
    /// even an unresponsive server cannot hang us.
    pub fn connect_with_timeout(address: &str, timeout: Duration) -> Result<Connection, Error> {
        let socket = crate::address::connect_any(address)?;
        socket.set_read_timeout(Some(timeout))?;
        socket.set_write_timeout(Some(timeout))?;
        Connection::from_socket(socket)
    }

    /// [`Connection::connect_with_timeout`], authenticating one command at
    /// a time, each after the server's answer to the previous one (as
    /// libdbus and GDBus do) instead of all at once: some servers cannot
    /// take the pipelined exchange (Debian 12's xdg-dbus-proxy 0.1.4 closes
    /// the connection).
    pub fn connect_step_by_step(address: &str, timeout: Duration) -> Result<Connection, Error> {
        let socket = crate::address::connect_any(address)?;
        socket.set_read_timeout(Some(timeout))?;
        socket.set_write_timeout(Some(timeout))?;
        Connection::from_socket_with(socket, Mode::StepByStep)
    }

    /// The session bus, from DBUS_SESSION_BUS_ADDRESS.
    pub fn session() -> Result<Connection, Error> {
        let address = std::env::var("DBUS_SESSION_BUS_ADDRESS")
            .map_err(|_| Error::NoBusAddress("DBUS_SESSION_BUS_ADDRESS"))?;
        Connection::connect(&address)
    }

    /// The system bus, from DBUS_SYSTEM_BUS_ADDRESS or its default socket.
    pub fn system() -> Result<Connection, Error> {
        Connection::connect(&system_bus_address())
    }

    /// Authenticate over an already connected stream and say Hello.
    pub fn from_stream(stream: UnixStream) -> Result<Connection, Error> {
        Connection::from_socket(Socket::Unix(stream))
    }

    /// Authenticate over a unix or tcp socket and say Hello.
    fn from_socket(stream: Socket) -> Result<Connection, Error> {
        Connection::from_socket_with(stream, Mode::Pipelined)
    }

    fn from_socket_with(stream: Socket, mode: Mode) -> Result<Connection, Error> {
        let timeout = stream.read_timeout()?;
        let mut transport = Transport::new(stream)?;
        let outcome = crate::handshake::authenticate(&mut transport, mode)?;
        let mut conn = Connection {
            transport,
            unique_name: String::new(),
            server_guid: outcome.guid,
            unix_fds: outcome.unix_fd,
            last_serial: 0,
            timeout,
            pending: VecDeque::new(),
        };
        let reply = conn.call(bus_call("Hello")).map_err(|e| match e {
            CallError::Remote(e) => Error::Protocol(format!("the bus refused Hello: {e}")),
            CallError::Connection(e) => e,
        })?;
        conn.unique_name = match reply.body_values()?.first() {
            Some(Value::String(name)) => name.clone(),
            _ => return Err(Error::Protocol("Hello reply carries no name".into())),
        };
        Ok(conn)
    }

    /// Our unique name, as given by the bus in reply to Hello.
    pub fn unique_name(&self) -> &str {
        &self.unique_name
    }

    /// The server's GUID from the SASL OK line.
    pub fn server_guid(&self) -> &str {
        &self.server_guid
    }

    /// Whether the server agreed to pass unix fds.
    pub fn can_pass_fds(&self) -> bool {
        self.unix_fds
    }

    /// Time-out for every blocking read and write, and for the whole wait
    /// of call() (None waits forever): they fail with Error::Timeout.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        self.transport.stream.set_read_timeout(timeout)?;
        self.transport.stream.set_write_timeout(timeout)?;
        self.transport.set_read_timeout(timeout);
        self.timeout = timeout;
        Ok(())
    }

    /// A fresh serial for a message the caller builds itself (send_raw,
    /// send_batch); send() takes its own. Serials skip 0 when they wrap.
    pub fn next_serial(&mut self) -> u32 {
        self.last_serial = self.last_serial.wrapping_add(1);
        if self.last_serial == 0 {
            self.last_serial = 1;
        }
        self.last_serial
    }

    /// Build `builder` with a fresh serial and send it with `fds`.
    pub fn send(&mut self, builder: MessageBuilder, fds: &[BorrowedFd<'_>]) -> Result<u32, Error> {
        let serial = self.next_serial();
        let builder = if fds.is_empty() {
            builder
        } else {
            builder.unix_fds(fds.len() as u32)
        };
        let bytes = builder.build(serial)?;
        self.send_raw(&bytes, fds)?;
        Ok(serial)
    }

    /// Send one already built message (its serial chosen by the caller,
    /// e.g. with next_serial()).
    pub fn send_raw(&mut self, message: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), Error> {
        self.check_fds(fds)?;
        self.transport.write_all(&[message], fds)
    }

    /// Send several already built messages with as few `sendmsg` calls as
    /// the socket allows (no fds).
    pub fn send_batch(&mut self, messages: &[Bytes]) -> Result<(), Error> {
        let parts: Vec<&[u8]> = messages.iter().map(|m| &m[..]).collect();
        self.transport.write_all(&parts, &[])
    }

    fn check_fds(&self, fds: &[BorrowedFd<'_>]) -> Result<(), Error> {
        if !fds.is_empty() && !self.unix_fds {
            return Err(Error::Protocol(
                "the server did not agree to unix fd passing".into(),
            ));
        }
        Ok(())
    }

    /// The next message: first those queued while call() waited, then the
    /// socket.
    pub fn receive(&mut self) -> Result<Received, Error> {
        if let Some(received) = self.pending.pop_front() {
            return Ok(received);
        }
        self.read_message()
    }

    fn read_message(&mut self) -> Result<Received, Error> {
        let frame = self.transport.read_frame()?;
        let message = Message::parse(frame)?;
        let fds = self.transport.take_fds(message.unix_fds() as usize)?;
        Ok((message, fds))
    }

    /// Send a method call and wait for its reply; other messages that
    /// arrive meanwhile are kept for receive(). An error reply becomes
    /// CallError::Remote.
    pub fn call(&mut self, builder: MessageBuilder) -> Result<Message, CallError> {
        self.call_with_fds(builder, &[]).map(|(reply, _)| reply)
    }

    /// call() with fds attached to the call and returned with the reply.
    pub fn call_with_fds(
        &mut self,
        builder: MessageBuilder,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Received, CallError> {
        let serial = self.send(builder, fds)?;
        self.wait_reply(serial)
    }

    /// Wait for the reply to the call sent with `serial`.
    pub fn wait_reply(&mut self, serial: u32) -> Result<Received, CallError> {
        // Each read is bounded by the socket time-out; this bounds the sum,
        // so a peer that keeps sending other messages cannot keep us here.
        let deadline = self.timeout.map(|t| Instant::now() + t);
        loop {
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(Error::Timeout.into());
            }
            let (message, fds) = self.read_message()?;
            let is_reply = matches!(
                message.msg_type(),
                MessageType::MethodReturn | MessageType::Error
            ) && message.reply_serial() == Some(serial);
            if !is_reply {
                self.pending.push_back((message, fds));
                continue;
            }
            if message.msg_type() == MessageType::Error {
                return Err(CallError::Remote(error_of(&message)));
            }
            return Ok((message, fds));
        }
    }

    /// Ask the bus to route messages matching `rule` to us.
    pub fn add_match(&mut self, rule: &str) -> Result<(), CallError> {
        self.call(bus_call("AddMatch").body(vec![Value::String(rule.into())]))?;
        Ok(())
    }

    pub fn remove_match(&mut self, rule: &str) -> Result<(), CallError> {
        self.call(bus_call("RemoveMatch").body(vec![Value::String(rule.into())]))?;
        Ok(())
    }

    /// RequestName; returns the bus's answer (1 primary owner, 2 in queue,
    /// 3 exists, 4 already owner).
    pub fn request_name(&mut self, name: &str, flags: u32) -> Result<u32, CallError> {
        let reply = self.call(
            bus_call("RequestName").body(vec![Value::String(name.into()), Value::Uint32(flags)]),
        )?;
        expect_u32(&reply)
    }

    /// ReleaseName; returns the bus's answer (1 released, 2 non-existent,
    /// 3 not owner).
    pub fn release_name(&mut self, name: &str) -> Result<u32, CallError> {
        let reply = self.call(bus_call("ReleaseName").body(vec![Value::String(name.into())]))?;
        expect_u32(&reply)
    }

    /// The bus's GUID (GetId).
    pub fn get_id(&mut self) -> Result<String, CallError> {
        let reply = self.call(bus_call("GetId"))?;
        expect_string(&reply)
    }

    /// The unique name owning `name` (GetNameOwner).
    pub fn get_name_owner(&mut self, name: &str) -> Result<String, CallError> {
        let reply = self.call(bus_call("GetNameOwner").body(vec![Value::String(name.into())]))?;
        expect_string(&reply)
    }
}

impl AsFd for Connection {
    /// The socket, e.g. to poll it before receive().
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.transport.stream.as_fd()
    }
}

/// The system bus address: DBUS_SYSTEM_BUS_ADDRESS or the default socket.
pub fn system_bus_address() -> String {
    std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
        .unwrap_or_else(|_| DEFAULT_SYSTEM_BUS_ADDRESS.to_owned())
}

/// A method call to the bus driver.
pub fn bus_call(member: &str) -> MessageBuilder {
    MessageBuilder::method_call(BUS_PATH, member)
        .interface(BUS_INTERFACE)
        .destination(BUS_NAME)
}

/// The name and message of an error reply.
pub fn error_of(message: &Message) -> DBusError {
    let text = match message.body_values() {
        Ok(values) => match values.into_iter().next() {
            Some(Value::String(s)) => s,
            _ => String::new(),
        },
        Err(e) => format!("(undecodable error body: {e})"),
    };
    DBusError {
        name: message.error_name().unwrap_or("").to_owned(),
        message: text,
    }
}

fn expect_u32(reply: &Message) -> Result<u32, CallError> {
    match reply.body_values()?.first() {
        Some(Value::Uint32(n)) => Ok(*n),
        _ => Err(unexpected(reply, "u")),
    }
}

fn expect_string(reply: &Message) -> Result<String, CallError> {
    match reply.body_values()?.into_iter().next() {
        Some(Value::String(s)) => Ok(s),
        _ => Err(unexpected(reply, "s")),
    }
}

fn unexpected(reply: &Message, wanted: &str) -> CallError {
    CallError::Connection(Error::Protocol(format!(
        "reply has signature {:?}, expected {wanted:?}",
        reply.signature()
    )))
}
