//! A dbus-python peer (python/peer.py) driven line by line from a test.
//!
//! The peer prints one result line per command, and event lines whenever a
//! signal reaches it (`signal ...`), one of its methods is called
//! (`called ...`) or, once it spies, a message to another peer reaches it
//! (`eavesdropped ...`). [`Peer::command`] returns the result and files events
//! away; [`Peer::wait_event`] finds them.

use std::io::Write;
use std::process::Command;
use std::time::Instant;

use crate::locate::python_script;
use crate::process::Background;
use crate::TIMEOUT;

/// `RequestName` flags (D-Bus specification).
pub mod flags {
    pub const ALLOW_REPLACEMENT: u32 = 0x1;
    pub const REPLACE_EXISTING: u32 = 0x2;
    pub const DO_NOT_QUEUE: u32 = 0x4;
}

pub struct Peer {
    process: Background,
    unique_name: String,
    pid: u32,
    events: Vec<String>,
    claimed: Vec<bool>,
}

fn is_event(line: &str) -> bool {
    line.starts_with("signal ") || line.starts_with("called ") || line.starts_with("eavesdropped ")
}

impl Peer {
    /// `cmd` runs the python interpreter against the bus (see
    /// [`Bus::peer`]), or a launcher whose last argument is the
    /// interpreter (`quickbus sandbox -- python3`): the script and its
    /// options are appended to `cmd`'s arguments.
    pub fn start(mut cmd: Command) -> Peer {
        cmd.arg("-u").arg(python_script("peer.py"));
        let mut process = Background::spawn(&mut cmd);
        let ready = process.wait_for_line(|line| line.starts_with("ready "));
        let mut words = ready.split(' ').skip(1);
        let unique_name = words.next().unwrap_or_default().to_owned();
        let pid = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        assert!(unique_name.starts_with(':'), "bad ready line {ready:?}");
        Peer {
            process,
            unique_name,
            pid,
            events: Vec::new(),
            claimed: Vec::new(),
        }
    }

    /// The peer's unique connection name (`:x.y`).
    pub fn unique_name(&self) -> &str {
        &self.unique_name
    }

    /// The peer's process id, as the peer itself reported it.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends one command line and returns its result line (events that
    /// arrive meanwhile are kept for [`Peer::wait_event`]).
    pub fn command(&mut self, line: &str) -> String {
        self.send(line);
        self.result()
    }

    /// Sends one command line without waiting for its result; collect it
    /// with [`Peer::result`] (useful when the result depends on what the test
    /// does meanwhile).
    pub fn send(&mut self, line: &str) {
        let stdin = self.process.stdin().expect("peer stdin is open");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|err| panic!("peer {} gone: {err}", self.unique_name));
    }

    /// The next result line of a command sent with [`Peer::send`].
    pub fn result(&mut self) -> String {
        loop {
            let reply = self.process.read_line();
            if is_event(&reply) {
                self.record(reply);
            } else {
                return reply;
            }
        }
    }

    /// Calls a method of org.freedesktop.DBus and returns the JSON reply;
    /// panics on an error reply.
    pub fn bus(&mut self, method: &str, signature: &str, json_args: &str) -> String {
        let reply = self.bus_call(method, signature, json_args);
        let prefix = format!("bus {method} ");
        match reply.strip_prefix(&prefix) {
            Some(json) => json.to_owned(),
            None => panic!("{method}{json_args} failed: {reply}"),
        }
    }

    /// Calls a method of org.freedesktop.DBus; returns the raw result line
    /// (`bus METHOD <json>` or `error NAME MESSAGE`).
    pub fn bus_call(&mut self, method: &str, signature: &str, json_args: &str) -> String {
        self.command(&format!("bus {method} {signature} {json_args}"))
    }

    pub fn request_name(&mut self, name: &str, flags: u32) -> u32 {
        let reply = self.bus("RequestName", "su", &format!(r#"["{name}", {flags}]"#));
        reply
            .parse()
            .unwrap_or_else(|_| panic!("RequestName reply {reply:?}"))
    }

    pub fn release_name(&mut self, name: &str) -> u32 {
        let reply = self.bus("ReleaseName", "s", &format!(r#"["{name}"]"#));
        reply
            .parse()
            .unwrap_or_else(|_| panic!("ReleaseName reply {reply:?}"))
    }

    pub fn add_match(&mut self, rule: &str) {
        let reply = self.bus_call("AddMatch", "s", &json_string_list(&[rule]));
        assert_eq!(reply, "bus AddMatch null", "AddMatch {rule}");
    }

    pub fn remove_match(&mut self, rule: &str) {
        let reply = self.bus_call("RemoveMatch", "s", &json_string_list(&[rule]));
        assert_eq!(reply, "bus RemoveMatch null", "RemoveMatch {rule}");
    }

    /// Exports the com.example.Test object at `path`.
    pub fn serve(&mut self, path: &str) {
        assert_eq!(self.command(&format!("serve {path}")), "serve ok");
    }

    /// Emits a signal described as JSON (see python/peer.py).
    pub fn emit(&mut self, spec: &str) {
        assert_eq!(self.command(&format!("emit {spec}")), "emit sent");
    }

    /// Waits (bounded) for an event line satisfying `wanted` that no earlier
    /// call returned, and returns it.
    pub fn wait_event(&mut self, mut wanted: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + TIMEOUT;
        let mut checked = 0;
        loop {
            for index in checked..self.events.len() {
                if !self.claimed[index] && wanted(&self.events[index]) {
                    self.claimed[index] = true;
                    return self.events[index].clone();
                }
            }
            checked = self.events.len();
            let left = deadline.saturating_duration_since(Instant::now());
            match self.process.try_read_line(left) {
                Some(line) if is_event(&line) => self.record(line),
                Some(line) => panic!("peer {}: unexpected line {line:?}", self.unique_name),
                None => panic!(
                    "peer {}: the awaited event did not come within {TIMEOUT:?}; events: {:#?}; stderr: {}",
                    self.unique_name,
                    self.events,
                    self.process.stderr()
                ),
            }
        }
    }

    /// Every event line seen so far, in arrival order.
    pub fn events(&self) -> &[String] {
        &self.events
    }

    fn record(&mut self, line: String) {
        self.events.push(line);
        self.claimed.push(false);
    }

    /// Closes the peer's stdin, which ends it, and waits (bounded) for its
    /// process (the launcher, if it was started through one) to exit.
    pub fn finish(mut self) -> std::process::ExitStatus {
        self.process.wait()
    }

    /// Ends the peer abruptly (its connection drops).
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// `["a", "b"]` with JSON string escaping of `"` and `\`.
pub fn json_string_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|item| format!("\"{}\"", item.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_string_list_escapes_quotes_and_backslashes() {
        assert_eq!(json_string_list(&[]), "[]");
        assert_eq!(json_string_list(&["a", "b"]), r#"["a", "b"]"#);
        assert_eq!(json_string_list(&[r#"x"y\z"#]), r#"["x\"y\\z"]"#);
    }

    #[test]
    fn events_are_signals_and_calls() {
        assert!(is_event("signal a.b path=/ sender=:1.1 dest=- args=[]"));
        assert!(is_event("called Echo [\"x\"] no_reply=False"));
        assert!(is_event(
            "eavesdropped method_call a.b.M sender=:1.1 dest=:1.2 args=[]"
        ));
        assert!(!is_event("bus GetId \"abc\""));
        assert!(!is_event("error org.x.Y message"));
    }
}
