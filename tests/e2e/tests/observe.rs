//! Seeing the bus: quickbus's Debug.Stats counters, `quickbus monitor`
//! next to dbus-monitor, `quickbus capture` read back by tshark, `stats`
//! with the exact numbers a scripted session produced, `top` in tmux and
//! `report` in headless Chromium.

#[path = "observe/support.rs"]
mod support;

use std::collections::BTreeMap;

use quickbus_client::{bus_call, Connection, MessageBuilder, Value};
use quickbus_e2e::{run_bounded, skip, Background, Bus, TempDir};
use support::{tool, Session, SessionCounts};

/// The `a{sv}` of a Debug.Stats reply as a map.
fn stats_dict(reply: &quickbus_client::Message) -> BTreeMap<String, Value> {
    let Some(Value::Array { items, .. }) = reply.body_values().unwrap().into_iter().next() else {
        panic!("Debug.Stats reply is not a dict");
    };
    items
        .into_iter()
        .filter_map(|entry| match entry {
            Value::DictEntry(k, v) => match (*k, *v) {
                (Value::String(k), Value::Variant(v)) => Some((k, *v)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn stats_call(member: &str) -> MessageBuilder {
    bus_call(member).interface("org.freedesktop.DBus.Debug.Stats")
}

#[test]
fn connection_stats_count_what_a_peer_sent_and_received() {
    // quickbus's own keys; dbus-daemon has other counters
    if skip::quickbus_only("Debug.Stats traffic counters") {
        return;
    }
    let bus = Bus::start();
    let mut watcher = Connection::connect(bus.address()).unwrap();
    let mut peer = Connection::connect(bus.address()).unwrap();
    peer.request_name("com.example.Counted", 0).unwrap();
    let counted_before = stats_dict(
        &watcher
            .call(
                stats_call("GetConnectionStats")
                    .body(vec![Value::String("com.example.Counted".into())]),
            )
            .unwrap(),
    );
    // Three calls and their three replies, and one call failing.
    for _ in 0..3 {
        peer.get_id().unwrap();
    }
    assert!(peer.get_name_owner("com.example.Nobody").is_err());
    let after = stats_dict(
        &watcher
            .call(
                stats_call("GetConnectionStats")
                    .body(vec![Value::String("com.example.Counted".into())]),
            )
            .unwrap(),
    );
    let delta = |key: &str| match (&after[key], &counted_before[key]) {
        (Value::Uint64(a), Value::Uint64(b)) => a - b,
        other => panic!("{key}: {other:?}"),
    };
    assert_eq!(delta("MessagesIn"), 4);
    assert_eq!(delta("MessagesOut"), 4);
    assert_eq!(delta("Errors"), 1);
    assert!(delta("BytesIn") > 0 && delta("BytesOut") > 0);
    assert_eq!(
        after["UniqueName"],
        Value::String(peer.unique_name().into())
    );
    for key in ["OutgoingBytes", "PeakOutgoingBytes", "PendingReplies"] {
        assert!(after.contains_key(key), "{key} missing: {after:?}");
    }
    let totals = stats_dict(&watcher.call(stats_call("GetStats")).unwrap());
    assert!(matches!(totals["MessagesIn"], Value::Uint64(n) if n >= 8));
    assert!(matches!(totals["Dropped"], Value::Uint64(0)));
}

/// Lines a monitor printed from the Begin marker signal to the End marker
/// (both included), with the varying receive times taken out.
fn between_markers(monitor: &mut Background, profile: bool) -> Vec<String> {
    let begin = monitor.wait_for_line(|l| l.contains("member=Begin") || l.ends_with("\tBegin"));
    let mut lines = vec![begin];
    loop {
        let line = monitor.read_line();
        let end = line.contains("member=End") || line.ends_with("\tEnd");
        lines.push(line);
        if end {
            break;
        }
    }
    lines
        .into_iter()
        .map(|line| {
            if profile {
                // type, timestamp, rest: drop the timestamp column.
                let mut cols: Vec<&str> = line.split('\t').collect();
                cols.remove(1);
                cols.join("\t")
            } else {
                match line.split_once(" time=") {
                    Some((head, rest)) => {
                        let rest = rest.split_once(' ').map_or("", |(_, r)| r);
                        format!("{head} {rest}")
                    }
                    None => line,
                }
            }
        })
        .collect()
}

/// `quickbus monitor` and dbus-monitor watch the same session: between two
/// marker signals their outputs are identical (receive times aside), in
/// the default format and with --profile.
#[test]
fn monitor_prints_what_dbus_monitor_prints() {
    let bus = Bus::start();
    for profile in [false, true] {
        let flag: &[&str] = if profile { &["--profile"] } else { &[] };
        let mut ours = Background::spawn(bus.client(tool()).arg("monitor").args(flag));
        let mut theirs = Background::spawn(bus.client("dbus-monitor").arg("--session").args(flag));
        // Each prints its first line only once it is a monitor.
        ours.read_line();
        theirs.read_line();
        let mut session = Session::start(&bus);
        session.marker("Begin");
        session.run();
        session.marker("End");
        let ours_lines = between_markers(&mut ours, profile);
        let theirs_lines = between_markers(&mut theirs, profile);
        assert_eq!(ours_lines, theirs_lines, "profile={profile}");
        // Markers, 6 calls and their answers, 3 signals, the round trip.
        assert!(ours_lines.len() >= 17, "{ours_lines:#?}");
    }
}

/// Signals carrying file descriptors of every kind dbus-monitor tells
/// apart (a socket pair, a pipe, a regular file, a memfd, a character
/// device, a directory; unix sockets listening on a path, connected to
/// one, abstract; tcp sockets listening and connected), at the top level
/// and inside a variant, a struct, an array and dicts: `quickbus monitor`
/// describes each as dbus-monitor does, line for line.
#[test]
fn monitor_prints_file_descriptors_as_dbus_monitor_prints_them() {
    use std::os::fd::{AsFd, BorrowedFd};
    use std::os::unix::net::{UnixListener, UnixStream};

    let bus = Bus::start();
    let mut ours = Background::spawn(bus.client(tool()).arg("monitor"));
    let mut theirs = Background::spawn(bus.client("dbus-monitor").arg("--session"));
    ours.read_line();
    theirs.read_line();

    let dir = TempDir::new();
    let (pair, _pair_end) = UnixStream::pair().unwrap();
    let (pipe_read, pipe_write) = rustix::pipe::pipe().unwrap();
    let file = std::fs::File::create(dir.path().join("file")).unwrap();
    let memfd =
        rustix::fs::memfd_create("quickbus-observe", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    let directory = std::fs::File::open(dir.path()).unwrap();
    let listening = UnixListener::bind(dir.path().join("socket")).unwrap();
    let connected = UnixStream::connect(dir.path().join("socket")).unwrap();
    let (accepted, _) = listening.accept().unwrap();
    let tcp_listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_connected = std::net::TcpStream::connect(tcp_listening.local_addr().unwrap()).unwrap();
    // An abstract socket: its name is unique to this test process.
    let abstract_name = format!("quickbus-observe-{}", std::process::id());
    let abstract_socket = {
        let fd = rustix::net::socket(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            None,
        )
        .unwrap();
        let addr =
            rustix::net::SocketAddrUnix::new_abstract_name(abstract_name.as_bytes()).unwrap();
        rustix::net::bind_unix(&fd, &addr).unwrap();
        fd
    };

    let fd = |i: u32| Value::UnixFd(i);
    let kinds: Vec<BorrowedFd<'_>> = vec![
        pair.as_fd(),
        pipe_read.as_fd(),
        file.as_fd(),
        memfd.as_fd(),
        null.as_fd(),
        directory.as_fd(),
    ];
    let sockets: Vec<BorrowedFd<'_>> = vec![
        listening.as_fd(),
        connected.as_fd(),
        accepted.as_fd(),
        abstract_socket.as_fd(),
        tcp_listening.as_fd(),
        tcp_connected.as_fd(),
    ];
    let containers: Vec<BorrowedFd<'_>> = vec![pair.as_fd(), pipe_write.as_fd(), memfd.as_fd()];
    let signals: Vec<(&str, Vec<Value>, Vec<BorrowedFd<'_>>)> = vec![
        ("Kinds", (0..6).map(fd).collect(), kinds),
        ("Sockets", (0..6).map(fd).collect(), sockets),
        (
            "Containers",
            vec![
                Value::Variant(Box::new(fd(0))),
                Value::Struct(vec![fd(1), Value::String("s".into())]),
                Value::Array {
                    elem_sig: "h".into(),
                    items: vec![fd(0), fd(1), fd(2)],
                },
                Value::Array {
                    elem_sig: "{sh}".into(),
                    items: vec![Value::DictEntry(
                        Box::new(Value::String("k".into())),
                        Box::new(fd(2)),
                    )],
                },
                Value::Array {
                    elem_sig: "{sv}".into(),
                    items: vec![Value::DictEntry(
                        Box::new(Value::String("v".into())),
                        Box::new(Value::Variant(Box::new(Value::Variant(Box::new(fd(1)))))),
                    )],
                },
            ],
            containers,
        ),
    ];

    let mut session = Session::start(&bus);
    session.marker("Begin");
    let mut sender = bus.connect();
    for (member, body, fds) in signals {
        sender
            .send(
                MessageBuilder::signal("/fds", "com.example.Fds", member).body(body),
                &fds,
            )
            .unwrap();
    }
    sender.get_id().unwrap();
    session.marker("End");
    let ours_lines = between_markers(&mut ours, false);
    let theirs_lines = between_markers(&mut theirs, false);
    assert_eq!(ours_lines, theirs_lines);
    // Every fd was described with its type, and the sockets with addresses.
    let text = theirs_lines.join("\n");
    for wanted in [
        "type: fifo",
        "type: file",
        "type: char",
        "type: directory",
        "name @\n",
        &format!("name @{abstract_name}"),
        "address family: inet",
        "         peer 127.0.0.1 port ",
    ] {
        assert!(text.contains(wanted), "{wanted:?} missing:\n{text}");
    }
}

/// Start `quickbus capture`, run the scripted session, stop the capture
/// with SIGINT; returns the file and what the session did.
fn capture_session(bus: &Bus, dir: &TempDir) -> (std::path::PathBuf, SessionCounts) {
    let file = dir.path().join("session.pcap");
    // The service is up before the capture starts, so the capture's
    // preamble records its owner.
    let mut session = Session::start(bus);
    let mut capture = Background::spawn(bus.client(tool()).arg("capture").arg("-o").arg(&file));
    support::wait_for_stderr(&capture, "capturing to");
    session.run();
    let counts = session.finish();
    let _keep_session = session;
    support::interrupt(&capture);
    let status = capture.wait();
    assert!(status.success(), "capture failed: {}", capture.stderr());
    // stderr is collected by a thread: its last line may trail the exit.
    support::wait_for_stderr(&capture, "messages captured to");
    (file, counts)
}

#[test]
fn tshark_decodes_every_captured_message_whole() {
    let bus = Bus::start();
    let dir = TempDir::new();
    let (file, counts) = capture_session(&bus, &dir);
    let out = run_bounded(std::process::Command::new("tshark").args([
        "-r",
        file.to_str().unwrap(),
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-e",
        "frame.len",
        "-e",
        "frame.cap_len",
        "-e",
        "dbus.message_type",
        "-e",
        "dbus.interface",
        "-e",
        "dbus.member",
        "-e",
        "_ws.malformed",
    ]))
    .success();
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split('\t').collect())
        .collect();
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!(row[0], row[1], "a truncated record: {row:?}");
        assert!(!row[2].is_empty(), "not decoded as D-Bus: {row:?}");
        assert!(
            row.get(5).is_none_or(|m| m.is_empty()),
            "malformed: {row:?}"
        );
    }
    let member_count = |member: &str| rows.iter().filter(|r| r[4] == member).count();
    assert_eq!(member_count("Echo"), counts.echo_calls);
    assert_eq!(member_count("Tick"), counts.ticks);
    // The large signals are whole: bigger than busctl's default snap length.
    let largest: usize = rows
        .iter()
        .map(|r| r[0].parse::<usize>().unwrap())
        .max()
        .unwrap();
    assert_eq!(largest, counts.largest_tick);
    assert!(largest > 4096);
    // Bustle's preamble: the owner of the session's well-known name was
    // asked for at the start.
    let names = run_bounded(std::process::Command::new("tshark").args([
        "-r",
        file.to_str().unwrap(),
        "-Y",
        "dbus.member == \"GetNameOwner\"",
        "-T",
        "fields",
        "-e",
        "dbus.type.string",
    ]))
    .success();
    assert!(names.stdout.contains("com.example.Observed"), "{names:#?}");
}

#[test]
fn stats_give_the_exact_counts_and_sizes_of_the_session() {
    let bus = Bus::start();
    let dir = TempDir::new();
    let (file, counts) = capture_session(&bus, &dir);
    let out = run_bounded(std::process::Command::new(tool()).args([
        "stats",
        "--json",
        file.to_str().unwrap(),
    ]))
    .success();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let freq = |kind: &str, member: &str| {
        json["frequencies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["type"] == kind && r["member"] == member)
            .map(|r| (r["count"].as_u64().unwrap(), r["bytes"].as_u64().unwrap()))
            .unwrap_or((0, 0))
    };
    let echo = "com.example.Observed.Echo";
    assert_eq!(
        freq("method_call", echo),
        (counts.echo_calls as u64, counts.echo_call_bytes)
    );
    assert_eq!(
        freq("method_return", echo),
        (counts.echo_calls as u64, counts.echo_reply_bytes)
    );
    assert_eq!(
        freq("signal", "com.example.Observed.Tick"),
        (counts.ticks as u64, counts.tick_bytes)
    );
    assert_eq!(
        freq("error", "com.example.Error.Failed"),
        (1, counts.error_bytes)
    );
    let method = json["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["member"] == echo)
        .unwrap();
    assert_eq!(method["durations"]["count"], counts.echo_calls);
    assert_eq!(method["unanswered"], 0);
    let fail = json["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["member"] == "com.example.Observed.Fail")
        .unwrap();
    assert_eq!(
        (fail["errors"].as_u64(), fail["unanswered"].as_u64()),
        (Some(1), Some(0))
    );
    let signals = json["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["type"] == "signal")
        .unwrap();
    assert_eq!(
        signals["largest"].as_f64().unwrap() as usize,
        counts.largest_tick
    );
    let server = json["talkers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["sender"] == counts.server_name.as_str())
        .unwrap();
    assert_eq!(server["names"][0], "com.example.Observed");
    // The human tables carry the same numbers.
    let text =
        run_bounded(std::process::Command::new(tool()).args(["stats", file.to_str().unwrap()]))
            .success();
    assert!(
        text.stdout.contains(&format!("  {echo}")),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("Top talkers"), "{}", text.stdout);
}

#[test]
fn stats_of_a_broken_file_is_a_clear_error() {
    let dir = TempDir::new();
    let file = dir.path().join("bad.pcap");
    std::fs::write(&file, b"this is not a capture").unwrap();
    let out =
        run_bounded(std::process::Command::new(tool()).args(["stats", file.to_str().unwrap()]))
            .failure();
    assert!(out.stderr.contains("not a pcap file"), "{out:#?}");
}

#[test]
fn capture_to_an_unwritable_file_fails_before_touching_the_bus() {
    let bus = Bus::start();
    let out = bus
        .run(
            tool().to_str().unwrap(),
            &["capture", "-o", "/nonexistent/dir/x.pcap"],
        )
        .failure();
    assert!(out.stderr.contains("cannot create"), "{out:#?}");
    let _ = watcher_is_unused(&bus);
}

/// The daemon is still fine after the failed capture.
fn watcher_is_unused(bus: &Bus) -> String {
    let mut conn = Connection::connect(bus.address()).unwrap();
    conn.get_id().unwrap()
}

/// A tmux server of our own, killed when the test ends.
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    fn command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new("tmux");
        cmd.arg("-S").arg(&self.socket);
        cmd
    }

    fn pane(&self) -> String {
        run_bounded(self.command().args(["capture-pane", "-p", "-t", "top"]))
            .success()
            .stdout
    }

    /// Waits (bounded) until the pane shows what `wanted` accepts.
    fn wait_for(&self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + quickbus_e2e::TIMEOUT;
        loop {
            let pane = self.pane();
            if wanted(&pane) {
                return pane;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "top never showed {what}; last screen:\n{pane}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = run_bounded(self.command().arg("kill-server"));
    }
}

/// `quickbus top` in tmux shows a busy client's name with a non-zero
/// message rate, re-sorts on a key press and quits on q.
#[test]
fn top_shows_a_busy_client_live() {
    if skip::quickbus_only("quickbus top (its rates come from quickbus's Debug.Stats keys)") {
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let bus = Bus::start();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let address = bus.address().to_owned();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut conn = Connection::connect(&address).unwrap();
            conn.request_name("com.example.Busy", 0).unwrap();
            while !stop.load(Ordering::Relaxed) {
                conn.get_id().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let dir = TempDir::new();
    let tmux = Tmux {
        socket: dir.path().join("tmux.sock"),
    };
    let command = format!(
        "env DBUS_SESSION_BUS_ADDRESS='{}' {} top",
        bus.address(),
        tool().display()
    );
    run_bounded(tmux.command().args([
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "200",
        "-y",
        "40",
        &command,
    ]))
    .success();
    let busy_row_rate = |pane: &str| -> Option<f64> {
        let line = pane.lines().find(|l| l.ends_with("com.example.Busy"))?;
        line.split_whitespace().next()?.parse().ok()
    };
    let pane = tmux.wait_for("the busy client's rate", |pane| {
        busy_row_rate(pane).is_some_and(|rate| rate > 0.0)
    });
    assert!(pane.contains("sorted by msg/s in"), "{pane}");
    run_bounded(tmux.command().args(["send-keys", "-t", "top", "n"])).success();
    tmux.wait_for("the name order", |pane| pane.contains("sorted by name"));
    run_bounded(tmux.command().args(["send-keys", "-t", "top", "q"])).success();
    let deadline = std::time::Instant::now() + quickbus_e2e::TIMEOUT;
    while run_bounded(tmux.command().args(["has-session", "-t", "top"]))
        .status
        .success()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "top did not quit on q"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
}

#[test]
fn top_iterations_print_plain_tables() {
    if skip::quickbus_only("quickbus top (its rates come from quickbus's Debug.Stats keys)") {
        return;
    }
    let bus = Bus::start();
    let mut named = Connection::connect(bus.address()).unwrap();
    named.request_name("com.example.Plain", 0).unwrap();
    let out = bus
        .run(
            tool().to_str().unwrap(),
            &["top", "--iterations", "1", "--interval", "0.1"],
        )
        .success();
    assert!(out.stdout.contains("MSG/S IN"), "{out:#?}");
    assert!(out.stdout.contains(named.unique_name()), "{out:#?}");
    assert!(out.stdout.contains("com.example.Plain"), "{out:#?}");
}

/// The report of the scripted session in headless Chromium: the services
/// are columns, calls are joined to their answers by arcs, the charts and
/// tables are there; the member filter narrows the rows.
/// `quickbus report FILE -o PAGE`, which must succeed.
fn render_report(file: &std::path::Path, page: &std::path::Path) {
    run_bounded(
        std::process::Command::new(tool())
            .arg("report")
            .arg(file)
            .arg("-o")
            .arg(page),
    )
    .success();
}

#[test]
fn report_renders_the_session_in_chromium() {
    let bus = Bus::start();
    let dir = TempDir::new();
    let (file, counts) = capture_session(&bus, &dir);
    let page = dir.path().join("report.html");
    render_report(&file, &page);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "the page needs a network"
    );
    let shot = dir.path().join("report.png");
    let dom = support::chromium(&page, "member=com.example.Observed", &shot);
    assert!(
        dom.contains("data-ready=\"yes\""),
        "the script did not finish: {dom}"
    );
    let service = format!("com.example.Observed ({})", counts.server_name);
    assert!(
        dom.contains(&format!("class=\"svc\" title=\"{service}\"")),
        "{dom}"
    );
    assert!(
        dom.contains("class=\"svc\" title=\"org.freedesktop.DBus\""),
        "{dom}"
    );
    // 5 Echo, 1 Fail, their 6 answers and 3 Ticks match the filter; each
    // answer has its arc.
    assert!(dom.contains("15 of "), "{dom}");
    assert_eq!(support::canvas_number(&dom, "data-rows-drawn"), 15);
    assert_eq!(support::canvas_number(&dom, "data-arcs-drawn"), 6);
    assert!(dom.contains("<table id=\"durations\">") && dom.contains("Message rate"));
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}

/// A million messages: the report opens, and scrolled to the middle it
/// draws only the window (with arcs) of rows there.
#[test]
fn report_of_a_million_messages_draws_only_the_visible_window() {
    let dir = TempDir::new();
    let file = dir.path().join("big.pcap");
    support::write_big_capture(&file, 500_000);
    let page = dir.path().join("big.html");
    render_report(&file, &page);
    let shot = dir.path().join("big.png");
    let dom = support::chromium(&page, "row=500000", &shot);
    assert!(
        dom.contains("1000000 of 1000000 messages"),
        "{}",
        &dom[..dom.len().min(2000)]
    );
    let rows = support::canvas_number(&dom, "data-rows-drawn");
    assert!(rows > 0 && rows < 200, "{rows} rows drawn");
    assert!(support::canvas_number(&dom, "data-arcs-drawn") > 0);
    assert!(std::fs::metadata(&shot).unwrap().len() > 0);
}
