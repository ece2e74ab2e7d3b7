//! Helpers of the observe tests: where the `quickbus` tool is, a scripted
//! session whose every message size is known, and process plumbing.

use std::path::PathBuf;
use std::time::Instant;

use quickbus_client::{Connection, Message, MessageBuilder, MessageType, Value};
use quickbus_e2e::{Background, Bus, POLL_INTERVAL, TIMEOUT};

/// The `quickbus` tool built beside this test (or in $CARGO_TARGET_DIR).
pub fn tool() -> PathBuf {
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(profile_dir) = exe.parent().and_then(|deps| deps.parent()) {
            candidates.push(profile_dir.join("quickbus"));
        }
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(target).join("debug/quickbus"));
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("no quickbus tool in {candidates:?}; run `cargo build -p quickbus`")
        })
}

/// Wait (bounded) until the process wrote `text` on stderr.
pub fn wait_for_stderr(process: &Background, text: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while !process.stderr().contains(text) {
        assert!(
            Instant::now() < deadline,
            "no {text:?} on stderr within {TIMEOUT:?}: {}",
            process.stderr()
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// SIGINT, as Ctrl-C would send.
pub fn interrupt(process: &Background) {
    let pid = rustix::process::Pid::from_raw(process.pid() as i32).expect("a child pid");
    rustix::process::kill_process(pid, rustix::process::Signal::Int).expect("kill -INT");
}

/// What the scripted session sent, as the monitor sees it (sizes of the
/// stamped messages the receivers got).
#[derive(Debug, Default)]
pub struct SessionCounts {
    pub server_name: String,
    pub echo_calls: usize,
    pub echo_call_bytes: u64,
    pub echo_reply_bytes: u64,
    pub error_bytes: u64,
    pub ticks: usize,
    pub tick_bytes: u64,
    pub largest_tick: usize,
}

pub const SERVICE: &str = "com.example.Observed";
const TICK_SIZES: [usize; 3] = [10, 20_000, 6_000];

/// A server owning com.example.Observed and a client calling it (Echo
/// five times, Fail once) and the server emitting three Tick signals, one
/// of them 20 kB.
pub struct Session {
    server: Connection,
    client: Connection,
    counts: SessionCounts,
}

fn next_matching(conn: &mut Connection, wanted: impl Fn(&Message) -> bool) -> Message {
    loop {
        let (msg, _) = conn.receive().expect("the session's message arrives");
        if wanted(&msg) {
            return msg;
        }
    }
}

impl Session {
    pub fn start(bus: &Bus) -> Session {
        let connect = || {
            let mut conn = Connection::connect(bus.address()).expect("connect");
            conn.set_timeout(Some(TIMEOUT)).unwrap();
            conn
        };
        let mut server = connect();
        let mut client = connect();
        server.request_name(SERVICE, 0).expect("RequestName");
        client
            .add_match(&format!("type='signal',interface='{SERVICE}'"))
            .expect("AddMatch");
        let counts = SessionCounts {
            server_name: server.unique_name().to_owned(),
            ..SessionCounts::default()
        };
        Session {
            server,
            client,
            counts,
        }
    }

    /// A signal that marks a point in the monitors' output; routed before
    /// this returns.
    pub fn marker(&mut self, member: &str) {
        self.client
            .send(
                MessageBuilder::signal("/marker", "com.example.Marker", member),
                &[],
            )
            .unwrap();
        self.client.get_id().unwrap();
    }

    /// One call from the client answered by the server; returns the sizes
    /// of the call and of the answer as delivered.
    fn call(&mut self, member: &str, fail: bool) -> (usize, usize) {
        let call = MessageBuilder::method_call("/observed", member)
            .interface(SERVICE)
            .destination(SERVICE)
            .body(vec![Value::String(format!("{member} please"))]);
        let serial = self.client.send(call, &[]).unwrap();
        let received = next_matching(&mut self.server, |m| {
            m.msg_type() == MessageType::MethodCall && m.member() == Some(member)
        });
        let caller = received.sender().unwrap().to_owned();
        let answer = if fail {
            MessageBuilder::error(received.serial(), "com.example.Error.Failed")
                .body(vec![Value::String("as asked".into())])
        } else {
            MessageBuilder::method_return(received.serial())
                .body(vec![Value::String("echo".into())])
        };
        self.server.send(answer.destination(caller), &[]).unwrap();
        let reply = next_matching(&mut self.client, |m| m.reply_serial() == Some(serial));
        (received.raw().len(), reply.raw().len())
    }

    pub fn run(&mut self) {
        for _ in 0..5 {
            let (call, reply) = self.call("Echo", false);
            self.counts.echo_calls += 1;
            self.counts.echo_call_bytes += call as u64;
            self.counts.echo_reply_bytes += reply as u64;
        }
        let (_, error) = self.call("Fail", true);
        self.counts.error_bytes += error as u64;
        for size in TICK_SIZES {
            let tick = MessageBuilder::signal("/observed", SERVICE, "Tick")
                .body(vec![Value::String("x".repeat(size))]);
            self.server.send(tick, &[]).unwrap();
            let seen = next_matching(&mut self.client, |m| m.member() == Some("Tick"));
            self.counts.ticks += 1;
            self.counts.tick_bytes += seen.raw().len() as u64;
            self.counts.largest_tick = self.counts.largest_tick.max(seen.raw().len());
        }
    }

    /// What the session did; the connections stay until the session drops.
    pub fn finish(&mut self) -> SessionCounts {
        std::mem::take(&mut self.counts)
    }
}
