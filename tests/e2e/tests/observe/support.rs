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

/// Headless Chromium on `page` (with `#fragment`): the DOM after the
/// page's script ran, and a screenshot at `screenshot`.
pub fn chromium(page: &std::path::Path, fragment: &str, screenshot: &std::path::Path) -> String {
    let profile = quickbus_e2e::TempDir::new();
    let url = format!("file://{}#{fragment}", page.display());
    let common = |cmd: &mut std::process::Command| {
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--virtual-time-budget=10000")
        .arg("--window-size=1200,900");
    };
    let mut dom = std::process::Command::new("chromium");
    common(&mut dom);
    let dom = quickbus_e2e::run_bounded(dom.arg("--dump-dom").arg(&url)).success();
    let mut shot = std::process::Command::new("chromium");
    common(&mut shot);
    quickbus_e2e::run_bounded(
        shot.arg(format!("--screenshot={}", screenshot.display()))
            .arg(&url),
    )
    .success();
    dom.stdout
}

/// A number attribute of the page's canvas, e.g. `data-arcs-drawn`.
pub fn canvas_number(dom: &str, attribute: &str) -> usize {
    let canvas = dom
        .split("<canvas")
        .nth(1)
        .and_then(|rest| rest.split('>').next())
        .unwrap_or_else(|| panic!("no canvas in the DOM"));
    let key = format!("{attribute}=\"");
    canvas
        .split(&key)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {attribute} on {canvas}"))
}

/// A pcap file of `pairs` calls from :1.1 to com.example.Big, each
/// answered 1 ms later (the same four bytes blobs over and over: pairing
/// works by sender and serial, and a serial is reused only after its reply).
pub fn write_big_capture(path: &std::path::Path, pairs: u32) {
    use std::io::Write;
    let call = MessageBuilder::method_call("/big", "Work")
        .interface("com.example.Big")
        .sender(":1.1")
        .destination(":1.2")
        .build(1)
        .unwrap();
    let reply = MessageBuilder::method_return(1)
        .sender(":1.2")
        .destination(":1.1")
        .build(7)
        .unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut header = Vec::new();
    header.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    header.extend_from_slice(&2u16.to_le_bytes());
    header.extend_from_slice(&4u16.to_le_bytes());
    for word in [0u32, 0, 1 << 27, 231] {
        header.extend_from_slice(&word.to_le_bytes());
    }
    out.write_all(&header).unwrap();
    let mut record = |micros: u64, data: &[u8]| {
        let len = data.len() as u32;
        for word in [
            (micros / 1_000_000) as u32,
            (micros % 1_000_000) as u32,
            len,
            len,
        ] {
            out.write_all(&word.to_le_bytes()).unwrap();
        }
        out.write_all(data).unwrap();
    };
    let start = 1_700_000_000_000_000u64;
    for i in 0..u64::from(pairs) {
        record(start + i * 2_000, &call);
        record(start + i * 2_000 + 1_000, &reply);
    }
    out.flush().unwrap();
}
