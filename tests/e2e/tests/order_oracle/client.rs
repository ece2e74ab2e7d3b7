//! A test connection that keeps what the oracle compares: the serials it
//! sent, and every message it received, in the order received.

use quickbus_client::{Connection, Message, MessageBuilder, MessageType};

use crate::oracle::Seen;

pub struct Client {
    conn: Connection,
    pub name: String,
    /// Hello's serial (1) first.
    pub sent: Vec<u32>,
    /// Everything received but the reply to Hello, which connecting
    /// consumed.
    pub got: Vec<Seen>,
}

impl Client {
    pub fn new(conn: Connection) -> Client {
        Client {
            name: conn.unique_name().to_owned(),
            conn,
            sent: vec![1],
            got: Vec::new(),
        }
    }

    pub fn send(&mut self, message: MessageBuilder) -> u32 {
        let serial = self
            .conn
            .send(message, &[])
            .unwrap_or_else(|e| panic!("{} cannot send: {e}", self.name));
        self.sent.push(serial);
        serial
    }

    /// The next message, kept in `got` (its last).
    pub fn receive(&mut self) -> Message {
        let (message, _) = self.conn.receive().unwrap_or_else(|e| {
            panic!(
                "{} stopped receiving after {} messages: {e}",
                self.name,
                self.got.len()
            )
        });
        self.got.push(Seen::of(&message));
        message
    }

    /// The message received last.
    pub fn last(&self) -> &Seen {
        self.got.last().expect("a message was received")
    }

    /// Sends a call and receives until its reply, which must not be an
    /// error; what comes before it is kept too.
    pub fn call(&mut self, message: MessageBuilder) -> Message {
        let serial = self.send(message);
        loop {
            let message = self.receive();
            let seen = self.last();
            if seen.reply_serial == Some(serial) {
                assert_eq!(
                    seen.kind,
                    MessageType::MethodReturn,
                    "{}'s call {serial} failed: {seen:?}",
                    self.name
                );
                return message;
            }
        }
    }
}
