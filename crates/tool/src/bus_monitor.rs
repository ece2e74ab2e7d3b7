//! A connection turned into a monitor with
//! `org.freedesktop.DBus.Monitoring.BecomeMonitor`, shared by `monitor` and
//! `capture`: it hands out every message the bus shows it, stamped with
//! the time it arrived, until the bus goes away or the user interrupts.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use quickbus_client::{bus_call, Connection, Error, Message, Value};

use crate::Failure;

/// How long one read waits before the stop flag is looked at again.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// dbus-monitor's prefix: a monitor sees unicast messages between others.
const EAVESDROP: &str = "eavesdrop=true";

/// One message as the monitor received it.
pub struct Seen {
    pub time: SystemTime,
    pub message: Message,
    pub fds: Vec<OwnedFd>,
}

pub enum Event {
    Message(Seen),
    Idle,
    End,
}

pub struct BusMonitor {
    conn: Connection,
    stop: Arc<AtomicBool>,
}

/// Each user rule prefixed with `eavesdrop=true,` as dbus-monitor does (a
/// later `eavesdrop=false` in the rule still wins).
pub fn monitor_rules(rules: &[String]) -> Vec<String> {
    rules.iter().map(|r| format!("{EAVESDROP},{r}")).collect()
}

impl BusMonitor {
    /// Connect to `address` and become a monitor for `rules` (empty: all
    /// messages). SIGINT and SIGTERM end [`BusMonitor::next`] cleanly, so
    /// callers can finish their output.
    pub fn start(address: &str, rules: &[String], timeout: Duration) -> Result<Self, Failure> {
        let mut conn = Connection::connect_with_timeout(address, timeout)?;
        let rules: Vec<Value> = monitor_rules(rules)
            .into_iter()
            .map(Value::String)
            .collect();
        let call = bus_call("BecomeMonitor")
            .interface("org.freedesktop.DBus.Monitoring")
            .body(vec![
                Value::Array {
                    elem_sig: "s".into(),
                    items: rules,
                },
                Value::Uint32(0),
            ]);
        conn.call(call)
            .map_err(|e| Failure(format!("cannot become a monitor: {}", Failure::from(e).0)))?;
        conn.set_timeout(Some(POLL_INTERVAL))?;
        let stop = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, stop.clone())
                .map_err(|e| Failure(format!("cannot handle signal {signal}: {e}")))?;
        }
        Ok(BusMonitor { conn, stop })
    }

    /// The next message; None when the bus closed the connection or the
    /// user asked to stop.
    pub fn next(&mut self) -> Result<Option<Seen>, Failure> {
        loop {
            match self.next_event()? {
                Event::Message(seen) => return Ok(Some(seen)),
                Event::Idle => continue,
                Event::End => return Ok(None),
            }
        }
    }

    /// The next message, or Idle when none came for a moment (a good
    /// time to flush output), or End.
    pub fn next_event(&mut self) -> Result<Event, Failure> {
        // Once asked to stop, what the bus already sent is still read (it
        // happened before the stop); the first quiet moment ends it.
        let stopping = self.stop.load(Ordering::Relaxed);
        match self.conn.receive() {
            Ok((message, fds)) => Ok(Event::Message(Seen {
                time: SystemTime::now(),
                message,
                fds,
            })),
            Err(Error::Timeout) if stopping => Ok(Event::End),
            Err(Error::Timeout) => Ok(Event::Idle),
            Err(Error::Closed) => Ok(Event::End),
            Err(e) => Err(e.into()),
        }
    }
}

/// Seconds and microseconds since the Unix epoch (dbus-monitor's clock).
pub fn epoch_parts(time: SystemTime) -> (u64, u32) {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    (since.as_secs(), since.subsec_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_get_the_eavesdrop_prefix() {
        assert_eq!(
            monitor_rules(&["type='signal'".into(), "eavesdrop=false".into()]),
            [
                "eavesdrop=true,type='signal'",
                "eavesdrop=true,eavesdrop=false"
            ]
        );
        assert!(monitor_rules(&[]).is_empty());
    }

    #[test]
    fn epoch_parts_split_seconds_and_micros() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(epoch_parts(t), (1_700_000_000, 123_456));
    }
}
