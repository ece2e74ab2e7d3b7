//! The round trips measured at every size: a method call to a peer, a
//! GetNameOwner, and broadcasts matching no rule, one rule and 100 rules.
//! Each is repeated; the median wall time and the daemon's CPU time per
//! round trip are kept (CPU time is steadier on a shared machine).

use std::time::Instant;

use quickbus_client::{bus_call, Connection, Message};
use quickbus_wire::{MessageBuilder, MessageType, Value};

use super::fill::{is_timeout, IO_TIMEOUT};
use super::Counter;
use crate::buses::RunningBus;
use crate::cpu_window::CpuWindow;
use crate::report::median;

const ECHO_NAME: &str = "org.quickbus.Scale.Echo";
const PATH: &str = "/org/quickbus/Scale";
const INTERFACE: &str = "org.quickbus.Scale";
/// The arguments of the signal the 100 rules match.
const HUNDRED_ARGS: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Probe {
    /// A method call to a peer and its reply.
    Call,
    /// GetNameOwner of the peer's name.
    GetNameOwner,
    /// A broadcast no rule matches, then GetId: the bus routes both in
    /// order, so the reply comes once the signal was handled.
    SignalNoMatch,
    /// A broadcast one rule (of one receiver) matches, to its delivery.
    SignalOneRule,
    /// A broadcast 100 rules (of one receiver) match, to its delivery.
    Signal100Rules,
}

impl Probe {
    pub const ALL: [Probe; 5] = [
        Probe::Call,
        Probe::GetNameOwner,
        Probe::SignalNoMatch,
        Probe::SignalOneRule,
        Probe::Signal100Rules,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Probe::Call => "call",
            Probe::GetNameOwner => "GetNameOwner",
            Probe::SignalNoMatch => "signal-0-rules",
            Probe::SignalOneRule => "signal-1-rule",
            Probe::Signal100Rules => "signal-100-rules",
        }
    }
}

/// One probe at one size.
#[derive(Clone, Debug)]
pub struct ProbeResult {
    pub probe: Probe,
    pub median_us: f64,
    /// Daemon CPU time per round trip.
    pub daemon_cpu_us: f64,
    /// Daemon instructions per round trip, under callgrind.
    pub instructions: Option<f64>,
}

/// The connections the probes use. The echo peer answers on its own
/// thread, which ends when the bus goes away.
pub struct Kit {
    prober: Connection,
    one_rule: Connection,
    hundred_rules: Connection,
}

impl Kit {
    pub fn start(bus: &RunningBus) -> Result<Kit, String> {
        let connect = || bus.connect(IO_TIMEOUT).map_err(|e| e.to_string());
        let mut echo = connect()?;
        echo.request_name(ECHO_NAME, 4)
            .map_err(|e| format!("RequestName {ECHO_NAME}: {e}"))?;
        spawn_reader(echo, |conn, msg| {
            if msg.msg_type() == MessageType::MethodCall {
                if let Some(sender) = msg.sender() {
                    let reply = MessageBuilder::method_return(msg.serial()).destination(sender);
                    let _ = conn.send(reply, &[]);
                }
            }
        });
        let mut one_rule = connect()?;
        one_rule
            .add_match("type='signal',member='One'")
            .map_err(|e| e.to_string())?;
        let mut hundred_rules = connect()?;
        for rule in hundred_rules_text() {
            hundred_rules.add_match(&rule).map_err(|e| e.to_string())?;
        }
        Ok(Kit {
            prober: connect()?,
            one_rule,
            hundred_rules,
        })
    }

    /// Every probe, `reps` times each (after one unmeasured round).
    pub fn measure(
        &mut self,
        bus: &RunningBus,
        reps: u32,
        counter: Counter,
    ) -> Result<Vec<ProbeResult>, String> {
        let mut results = Vec::new();
        for probe in Probe::ALL {
            self.once(probe)?;
            counter.map(|c| c()).transpose()?;
            let window = CpuWindow::open(|| bus.cpu_seconds());
            let mut times = Vec::with_capacity(reps as usize);
            for _ in 0..reps {
                let start = Instant::now();
                self.once(probe)?;
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
            let cpu = window.close().cpu_seconds;
            let instructions = counter.map(|c| c()).transpose()?;
            results.push(ProbeResult {
                probe,
                median_us: median(&mut times),
                daemon_cpu_us: cpu * 1e6 / f64::from(reps),
                instructions: instructions.map(|n| n as f64 / f64::from(reps)),
            });
        }
        Ok(results)
    }

    fn once(&mut self, probe: Probe) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| format!("{}: {e}", probe.name());
        match probe {
            Probe::Call => {
                let call = MessageBuilder::method_call(PATH, "Echo")
                    .interface(INTERFACE)
                    .destination(ECHO_NAME);
                self.prober.call(call).map_err(|e| err(&e))?;
            }
            Probe::GetNameOwner => {
                self.prober.get_name_owner(ECHO_NAME).map_err(|e| err(&e))?;
            }
            Probe::SignalNoMatch => {
                self.prober
                    .send(MessageBuilder::signal(PATH, INTERFACE, "Nobody"), &[])
                    .map_err(|e| err(&e))?;
                self.prober.call(bus_call("GetId")).map_err(|e| err(&e))?;
            }
            Probe::SignalOneRule => {
                self.prober
                    .send(MessageBuilder::signal(PATH, INTERFACE, "One"), &[])
                    .map_err(|e| err(&e))?;
                wait_signal(&mut self.one_rule, "One").map_err(|e| err(&e))?;
            }
            Probe::Signal100Rules => {
                let args = HUNDRED_ARGS.map(|a| Value::String(a.into())).to_vec();
                let signal = MessageBuilder::signal(PATH, INTERFACE, "Hundred").body(args);
                self.prober.send(signal, &[]).map_err(|e| err(&e))?;
                wait_signal(&mut self.hundred_rules, "Hundred").map_err(|e| err(&e))?;
            }
        }
        Ok(())
    }
}

/// Read until the signal `member` arrives (NameAcquired and the like are
/// skipped); each read is bounded by the connection's time-out.
fn wait_signal(conn: &mut Connection, member: &str) -> Result<(), quickbus_client::Error> {
    loop {
        let (msg, _) = conn.receive()?;
        if msg.msg_type() == MessageType::Signal && msg.member() == Some(member) {
            return Ok(());
        }
    }
}

/// 100 distinct rules that all match the "Hundred" signal: each has
/// `member='Hundred'` and a different subset of seven more keys the
/// signal satisfies. Only that signal matches them.
pub fn hundred_rules_text() -> Vec<String> {
    let optional = [
        "type='signal'".to_owned(),
        format!("interface='{INTERFACE}'"),
        format!("path='{PATH}'"),
        format!("arg0='{}'", HUNDRED_ARGS[0]),
        format!("arg1='{}'", HUNDRED_ARGS[1]),
        format!("arg2='{}'", HUNDRED_ARGS[2]),
        format!("arg3='{}'", HUNDRED_ARGS[3]),
    ];
    (0u32..100)
        .map(|subset| {
            let mut keys = vec!["member='Hundred'".to_owned()];
            for (bit, key) in optional.iter().enumerate() {
                if subset & (1 << bit) != 0 {
                    keys.push(key.clone());
                }
            }
            keys.join(",")
        })
        .collect()
}

/// Hand `conn` to a thread that gives `handle` every message it receives
/// until the bus closes the connection.
pub fn spawn_reader(
    mut conn: Connection,
    mut handle: impl FnMut(&mut Connection, Message) + Send + 'static,
) {
    std::thread::spawn(move || loop {
        match conn.receive() {
            Ok((msg, _)) => handle(&mut conn, msg),
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_hundred_rules_are_distinct_and_all_name_the_member() {
        let rules = hundred_rules_text();
        assert_eq!(rules.len(), 100);
        assert_eq!(rules.iter().collect::<HashSet<_>>().len(), 100);
        assert!(rules.iter().all(|r| r.starts_with("member='Hundred'")));
        assert_eq!(rules[0], "member='Hundred'");
    }
}
