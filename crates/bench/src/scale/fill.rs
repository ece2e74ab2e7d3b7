//! Installing a phase's items on a bus, one block at a time: names and
//! match rules from one connection, client connections, and method calls
//! to a peer that never answers. Requests to the driver are pipelined (a
//! window sent, then its replies read), so 100,000 of them do not cost
//! 100,000 round trips of the client.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use quickbus_client::{bus_call, Connection, Error};
use quickbus_wire::{MessageBuilder, MessageType, Value};

use super::probes::spawn_reader;
use super::Phase;
use crate::buses::RunningBus;

/// Bound of every blocking read and write of the bench's connections.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Requests sent before their replies are read: small enough that replies
/// and signals never fill the socket buffers while the client writes.
const WINDOW: usize = 256;
/// `RequestName` flag: fail rather than queue.
const DO_NOT_QUEUE: u32 = 4;
/// The peer the pending calls go to; it reads them and never answers.
pub const SINK_NAME: &str = "org.quickbus.Scale.Sink";

/// The connections holding one phase's items.
pub enum Filler {
    /// Names or rules, all from this connection.
    Driver { phase: Phase, conn: Connection },
    /// Open client connections.
    Connections {
        address: String,
        open: Vec<Connection>,
    },
    /// The caller; the sink that never replies reads on its own thread.
    Pending { caller: Connection },
}

impl Filler {
    pub fn start(phase: Phase, bus: &RunningBus) -> Result<Filler, String> {
        let connect = || bus.connect(IO_TIMEOUT).map_err(|e| e.to_string());
        Ok(match phase {
            Phase::Names | Phase::Rules => Filler::Driver {
                phase,
                conn: connect()?,
            },
            Phase::Connections => Filler::Connections {
                address: bus.address.clone(),
                open: Vec::new(),
            },
            Phase::Pending => {
                let mut sink = connect()?;
                sink.request_name(SINK_NAME, DO_NOT_QUEUE)
                    .map_err(|e| format!("RequestName {SINK_NAME}: {e}"))?;
                spawn_reader(sink, |_, _| {});
                Filler::Pending { caller: connect()? }
            }
        })
    }

    /// Add items `first..first + count`.
    pub fn add(&mut self, first: usize, count: usize) -> Result<(), String> {
        let items = first..first + count;
        match self {
            Filler::Driver {
                phase: Phase::Names,
                conn,
            } => pipeline(
                conn,
                items.map(|i| {
                    bus_call("RequestName")
                        .body(vec![Value::String(name(i)), Value::Uint32(DO_NOT_QUEUE)])
                }),
            ),
            Filler::Driver { conn, .. } => pipeline(
                conn,
                items.map(|i| bus_call("AddMatch").body(vec![Value::String(rule(i))])),
            ),
            Filler::Connections { address, open } => {
                for _ in items {
                    let conn = Connection::connect_with_timeout(address, IO_TIMEOUT)
                        .map_err(|e| e.to_string())?;
                    open.push(conn);
                }
                Ok(())
            }
            Filler::Pending { caller } => {
                let calls: Vec<MessageBuilder> = items.map(call_to_sink).collect();
                for window in calls.chunks(WINDOW) {
                    let built = window
                        .iter()
                        .map(|b| b.clone().build(caller.next_serial()))
                        .collect::<Result<Vec<Bytes>, _>>()
                        .map_err(|e| e.to_string())?;
                    caller.send_batch(&built).map_err(|e| e.to_string())?;
                }
                // The bus handles a connection's messages in order: once it
                // answers this, it has taken in every call before it.
                caller.get_id().map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    }
}

/// The i-th well-known name.
pub fn name(i: usize) -> String {
    format!("org.example.Name{i}")
}

/// The i-th match rule: sender-less path rules, and rules keyed by sender,
/// interface, member and arg0, in turn. None matches a probe's message.
pub fn rule(i: usize) -> String {
    match i % 5 {
        0 => format!("type='signal',path='/org/example/Foo{i}'"),
        1 => format!("type='signal',sender='org.example.Sender{i}'"),
        2 => format!("type='signal',interface='org.example.Foo{i}'"),
        3 => format!("type='signal',member='Foo{i}'"),
        _ => format!("type='signal',arg0='foo{i}'"),
    }
}

fn call_to_sink(i: usize) -> MessageBuilder {
    MessageBuilder::method_call("/org/quickbus/Scale", "Wait")
        .interface("org.quickbus.Scale")
        .destination(SINK_NAME)
        .body(vec![Value::Uint32(i as u32)])
}

/// Send `requests` to the driver a window at a time and read every reply;
/// the first error reply fails the whole.
pub(crate) fn pipeline(
    conn: &mut Connection,
    requests: impl Iterator<Item = MessageBuilder>,
) -> Result<(), String> {
    let requests: Vec<MessageBuilder> = requests.collect();
    for window in requests.chunks(WINDOW) {
        let mut waiting = HashSet::with_capacity(window.len());
        let mut built = Vec::with_capacity(window.len());
        for request in window {
            let serial = conn.next_serial();
            built.push(request.clone().build(serial).map_err(|e| e.to_string())?);
            waiting.insert(serial);
        }
        conn.send_batch(&built).map_err(|e| e.to_string())?;
        while !waiting.is_empty() {
            let (msg, _) = conn.receive().map_err(|e| e.to_string())?;
            let Some(serial) = msg.reply_serial() else {
                continue; // NameAcquired and other signals
            };
            if !waiting.remove(&serial) {
                continue;
            }
            if msg.msg_type() == MessageType::Error {
                let e = quickbus_client::error_of(&msg);
                return Err(format!("{}: {}", e.name, e.message));
            }
        }
    }
    Ok(())
}

/// Raise this process's soft fd limit to its hard limit; returns the limit
/// now in force.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if let Some(max) = limit.maximum {
        limit.current = Some(max);
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Whether a read failed only because nothing arrived in time.
pub fn is_timeout(e: &Error) -> bool {
    match e {
        Error::Timeout => true,
        Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_cycle_through_the_keys_and_are_distinct() {
        let rules: Vec<String> = (0..10).map(rule).collect();
        for key in ["path=", "sender=", "interface=", "member=", "arg0="] {
            assert_eq!(rules.iter().filter(|r| r.contains(key)).count(), 2, "{key}");
        }
        let distinct: HashSet<&String> = rules.iter().collect();
        assert_eq!(distinct.len(), rules.len());
    }

    #[test]
    fn names_are_valid_bus_names() {
        for i in [0, 99_999, 999_999] {
            assert!(
                quickbus_wire::names::is_valid_bus_name(&name(i)),
                "{}",
                name(i)
            );
        }
    }
}
