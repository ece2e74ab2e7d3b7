//! Where the daemon's log lines go: syslog (`--syslog`, `--syslog-only`,
//! `<syslog/>`, also after `--fork`), the journal's native protocol under
//! systemd (`JOURNAL_STREAM`), with priorities and connection fields, and
//! which lines are warnings at all.
//!
//! The syslog and journal sockets here are datagram sockets the test binds:
//! syslog's through quickbus's test-only `QUICKBUS_TEST_SYSLOG_SOCKET`, the
//! journal's by running the daemon in a mount namespace whose
//! `/run/systemd/journal` is the test's directory. dbus-daemon offers
//! neither (libc's syslog always uses /dev/log, and it writes no native
//! journal entries), so these are quickbus's promises.

use std::collections::HashMap;
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use quickbus_client::Connection;
use quickbus_e2e::{
    daemon_path, run_bounded, skip, write_config_with, Bus, Listen, TempDir, TIMEOUT,
};
use quickbus_wire::MessageBuilder;

const SYSLOG_ENV: &str = "QUICKBUS_TEST_SYSLOG_SOCKET";

/// A service directory with a file that cannot be read as one (a warning
/// at start-up), a service whose program fails (an activation), and a
/// mandatory rule refusing GetId (a policy denial).
fn scene_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let services = dir.join("services");
    std::fs::create_dir_all(&services).unwrap();
    std::fs::write(services.join("broken.service"), "not a service file\n").unwrap();
    std::fs::write(
        services.join("org.example.Fails.service"),
        "[D-BUS Service]\nName=org.example.Fails\nExec=/bin/false\n",
    )
    .unwrap();
    let extra = format!(
        r#"<servicedir>{}</servicedir>
  <policy context="mandatory">
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus" send_member="GetId"/>
  </policy>
  {extra}"#,
        services.display()
    );
    write_config_with(dir, Listen::UnixPath, &extra)
}

/// Make the bus log an activation and a denial.
fn provoke(bus: &Bus) {
    bus.run(
        "dbus-send",
        &[
            "--session",
            "--print-reply",
            "--dest=org.example.Fails",
            "/",
            "org.example.Fails.Hello",
        ],
    )
    .failure();
    bus.run(
        "dbus-send",
        &[
            "--session",
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetId",
        ],
    )
    .failure();
}

/// A fake log socket the test binds, read all the time by a thread of its
/// own: a datagram socket holds only `net.unix.max_dgram_qlen` datagrams
/// (10 by default), and then the daemon's next log line blocks its loop
/// until the test reads. A test that makes the bus log first (`provoke`
/// waits for dbus-send's replies) and reads after would stall the bus
/// meanwhile, by dbus-send's 25 s time-out, as soon as the daemon logs
/// more than ten lines first (a daemon with a thread pool does, the
/// test command's second pass).
struct LogSocket {
    datagrams: mpsc::Receiver<Vec<u8>>,
    /// Shut down on drop, which wakes the reader's `recv`.
    socket: UnixDatagram,
    closed: Arc<AtomicBool>,
}

impl Drop for LogSocket {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

fn bind_datagram(path: &Path) -> LogSocket {
    read_in_background(bind_unread(path))
}

/// A fake log socket nobody reads yet: once its queue is full, the
/// daemon's sends to it block ([`read_in_background`] reads it later).
fn bind_unread(path: &Path) -> UnixDatagram {
    UnixDatagram::bind(path).expect("bind the fake log socket")
}

fn read_in_background(socket: UnixDatagram) -> LogSocket {
    let reader = socket
        .try_clone()
        .expect("a second handle of the log socket");
    let closed = Arc::new(AtomicBool::new(false));
    let (sender, datagrams) = mpsc::channel();
    let reader_closed = Arc::clone(&closed);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        // An empty datagram is no line (the journal's protocol sends one
        // with a memfd for a large entry), and after the shutdown every
        // `recv` returns 0 at once.
        while let Ok(n) = reader.recv(&mut buf) {
            if reader_closed.load(Ordering::Relaxed) {
                return;
            }
            if n > 0 && sender.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    LogSocket {
        datagrams,
        socket,
        closed,
    }
}

/// Datagrams from `socket` until `done` holds for what arrived (bounded).
fn receive_until(socket: &LogSocket, done: impl Fn(&[Vec<u8>]) -> bool) -> Vec<Vec<u8>> {
    let give_up = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    while !done(&got) {
        let left = give_up.saturating_duration_since(Instant::now());
        match socket.datagrams.recv_timeout(left) {
            Ok(datagram) => got.push(datagram),
            Err(_) => panic!(
                "gave up waiting; got {:?}",
                got.iter()
                    .map(|d| String::from_utf8_lossy(d).into_owned())
                    .collect::<Vec<_>>()
            ),
        }
    }
    got
}

fn texts(datagrams: &[Vec<u8>]) -> Vec<String> {
    datagrams
        .iter()
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .collect()
}

fn has(lines: &[String], needle: &str) -> bool {
    lines.iter().any(|l| l.contains(needle))
}

fn line_with<'a>(lines: &'a [String], needle: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line contains {needle:?}: {lines:#?}"))
}

const ACTIVATING: &str = "Activating service name='org.example.Fails' requested by ':1.";
const FAILED: &str = "Activated service 'org.example.Fails' failed";
const DENIED: &str = "Rejected send message";

/// `cmd` (the daemon, with whatever environment the test adds) started on
/// `config` with `--syslog-only`, its syslog the test's socket `dir/log`.
fn start_syslog_only(dir: TempDir, config: &Path, mut cmd: Command) -> Bus {
    cmd.env(SYSLOG_ENV, dir.path().join("log"));
    Bus::start_command(
        dir,
        cmd,
        &[
            format!("--config-file={}", config.display()),
            "--syslog-only".into(),
        ],
    )
}

#[test]
fn syslog_only_sends_every_line_to_syslog_with_its_priority() {
    if skip::quickbus_only("--syslog-only's priorities") {
        return;
    }
    let dir = TempDir::new();
    let syslog = bind_datagram(&dir.path().join("log"));
    let config = scene_config(dir.path(), "");
    let bus = start_syslog_only(dir, &config, Command::new(daemon_path()));
    provoke(&bus);
    bus.reload_config();
    let lines = texts(&receive_until(&syslog, |got| {
        let t = texts(got);
        has(&t, FAILED) && has(&t, DENIED) && has(&t, "Reloaded configuration")
    }));
    // <facility * 8 + severity>: daemon is 3, auth 4; warning 4, notice 5,
    // info 6.
    assert!(line_with(&lines, "broken.service").starts_with("<28>"));
    let activating = line_with(&lines, ACTIVATING);
    assert!(activating.starts_with("<30>"), "{activating}");
    assert!(
        activating.contains("(uid=0 pid=") && activating.contains(" comm=\"dbus-send "),
        "{activating}"
    );
    assert!(
        activating.contains(&format!(" quickbus-daemon[{}]: ", bus.pid())),
        "{activating}"
    );
    assert!(line_with(&lines, DENIED).starts_with("<37>"));
    assert!(line_with(&lines, FAILED).starts_with("<30>"));
    assert!(line_with(&lines, ": Reloaded configuration").starts_with("<30>"));
    assert_eq!(bus.log(), "", "--syslog-only wrote to stderr");
}

#[test]
fn the_configurations_syslog_still_gets_lines_after_fork() {
    if skip::quickbus_only("logging to syslog after --fork") {
        return;
    }
    let dir = TempDir::new();
    let syslog = bind_datagram(&dir.path().join("log"));
    let config = scene_config(dir.path(), "<syslog/>");
    // The parent exits once the forked daemon printed its address and pid.
    let started = run_bounded(
        Command::new(daemon_path())
            .env(SYSLOG_ENV, dir.path().join("log"))
            .arg(format!("--config-file={}", config.display()))
            .args(["--fork", "--print-address", "--print-pid"]),
    )
    .success();
    let mut out = started.stdout.lines();
    let address = out.next().expect("address line").to_owned();
    let pid: u32 = out.next().expect("pid line").parse().expect("a pid");
    let daemon = ForkedDaemon(pid);

    let run = |args: &[&str]| {
        run_bounded(
            Command::new("dbus-send")
                .env("DBUS_SESSION_BUS_ADDRESS", &address)
                .args(args),
        )
    };
    run(&[
        "--session",
        "--print-reply",
        "--dest=org.example.Fails",
        "/",
        "org.example.Fails.Hello",
    ])
    .failure();
    let lines = texts(&receive_until(&syslog, |got| has(&texts(got), FAILED)));
    let activating = line_with(&lines, ACTIVATING);
    assert!(
        activating.contains(&format!(" quickbus-daemon[{}]: ", daemon.0)),
        "the line comes from the forked daemon: {activating}"
    );
    // Logged before the fork: written once, by the process that logged
    // it, not again by the forked daemon.
    let hook = format!("{SYSLOG_ENV}={} is set", dir.path().join("log").display());
    let copies: Vec<&String> = lines.iter().filter(|l| l.contains(&hook)).collect();
    assert_eq!(copies.len(), 1, "{lines:#?}");
    assert!(
        !copies[0].contains(&format!(" quickbus-daemon[{}]: ", daemon.0)),
        "{}",
        copies[0]
    );
}

/// The reason a daemon cannot start is its last line: written to syslog
/// before it exits (the log's thread has it queued), and printed on
/// standard error too, which `--syslog-only` otherwise leaves silent.
#[test]
fn a_fatal_start_up_error_reaches_syslog_before_the_daemon_exits() {
    if skip::quickbus_only("--syslog-only's fatal error") {
        return;
    }
    let dir = TempDir::new();
    let syslog = bind_datagram(&dir.path().join("log"));
    let config = scene_config(dir.path(), "");
    let nowhere = dir.path().join("no such directory").join("socket");
    let failed = run_bounded(
        Command::new(daemon_path())
            .env(SYSLOG_ENV, dir.path().join("log"))
            .arg(format!("--config-file={}", config.display()))
            .arg(format!("--address=unix:path={}", nowhere.display()))
            .args(["--syslog-only", "--nofork"]),
    )
    .failure();
    const FATAL: &str = "Failed to start message bus: ";
    assert!(failed.stderr.contains(FATAL), "{failed:#?}");
    let lines = texts(&receive_until(&syslog, |got| has(&texts(got), FATAL)));
    // daemon (3) * 8 + error (3)
    assert!(line_with(&lines, FATAL).starts_with("<27>"), "{lines:#?}");
}

/// A restart in place executes a new image, which has no log thread of
/// the old one's: the old image's last lines (at debug level, one comes
/// after the handover's check in a child, just before the exec) are
/// written before the exec, once, and the new image's after them.
#[test]
fn a_restart_in_place_writes_the_old_images_lines_once() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    const RESTARTING: &str = ": restarting in place";
    const CHECKED: &str = ": handover read back in a child";
    const RESTARTED: &str = ": restarted in place";
    let dir = TempDir::new();
    let syslog = bind_datagram(&dir.path().join("log"));
    let config = write_config_with(dir.path(), Listen::UnixPath, "");
    let mut cmd = Command::new(daemon_path());
    cmd.env("QUICKBUS_LOG", "debug");
    let bus = start_syslog_only(dir, &config, cmd);
    let pid = rustix::process::Pid::from_raw(bus.pid() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::Usr2).expect("SIGUSR2");
    let lines = texts(&receive_until(&syslog, |got| has(&texts(got), RESTARTED)));
    let at = |needle: &str| {
        let found: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains(needle))
            .collect();
        assert_eq!(found.len(), 1, "{needle:?} once: {lines:#?}");
        found[0]
    };
    assert!(at(RESTARTING) < at(CHECKED), "{lines:#?}");
    assert!(at(CHECKED) < at(RESTARTED), "{lines:#?}");
    bus.connect().get_id().expect("the new image serves");
}

/// A daemon that forked away from us: SIGTERM on drop, and wait (bounded)
/// until it is gone.
struct ForkedDaemon(u32);

impl Drop for ForkedDaemon {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.0 as i32).expect("a pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::Term);
        let give_up = Instant::now() + TIMEOUT;
        while Path::new(&format!("/proc/{}", self.0)).exists() && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One native-protocol journal entry: `KEY=value` lines, or `KEY`, a
/// 64-bit little-endian length and that many bytes (values with newlines).
fn journal_fields(mut datagram: &[u8]) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    while !datagram.is_empty() {
        let end = datagram.iter().position(|&b| b == b'\n').expect("newline");
        let line = &datagram[..end];
        datagram = &datagram[end + 1..];
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            let key = String::from_utf8_lossy(&line[..eq]).into_owned();
            fields.insert(key, String::from_utf8_lossy(&line[eq + 1..]).into_owned());
        } else {
            let len = u64::from_le_bytes(datagram[..8].try_into().unwrap()) as usize;
            let value = &datagram[8..8 + len];
            fields.insert(
                String::from_utf8_lossy(line).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            );
            datagram = &datagram[8 + len + 1..];
        }
    }
    fields
}

/// Runs the daemon in a mount namespace where `journal_dir` is
/// `/run/systemd/journal` and `JOURNAL_STREAM` names its stderr, as
/// systemd starts a service whose output goes to the journal.
fn start_under_journal(dir: TempDir, journal_dir: &Path, syslog: &Path, args: &[String]) -> Bus {
    let script = r#"set -e
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/journal
mount --bind "$0" /run/systemd/journal
JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2)
export JOURNAL_STREAM
exec "$@""#;
    let probe = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "this test needs `unshare -m` (root, util-linux) to give the daemon a fake journal"
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", script])
        .arg(journal_dir)
        .arg(daemon_path())
        .env(SYSLOG_ENV, syslog);
    Bus::start_command(dir, cmd, args)
}

fn journal_entries_until(
    socket: &LogSocket,
    done: impl Fn(&[HashMap<String, String>]) -> bool,
) -> Vec<HashMap<String, String>> {
    let parse = |got: &[Vec<u8>]| got.iter().map(|d| journal_fields(d)).collect::<Vec<_>>();
    parse(&receive_until(socket, |got| done(&parse(got))))
}

fn entry<'a>(entries: &'a [HashMap<String, String>], needle: &str) -> &'a HashMap<String, String> {
    entries
        .iter()
        .find(|e| e.get("MESSAGE").is_some_and(|m| m.contains(needle)))
        .unwrap_or_else(|| panic!("no entry says {needle:?}: {entries:#?}"))
}

#[test]
fn under_systemd_lines_go_to_the_journal_with_priorities_and_fields() {
    if skip::quickbus_only("logging to the journal with fields") {
        return;
    }
    // stderr is the journal (--nosyslog), the system log is (on a system
    // bus: <syslog/>, --syslog-only as Debian's unit runs it), or both are
    // (--syslog: each line is sent once all the same).
    for mode in ["--nosyslog", "--syslog-only", "--syslog"] {
        let dir = TempDir::new();
        let journal_dir = dir.path().join("journal");
        std::fs::create_dir(&journal_dir).unwrap();
        let journal = bind_datagram(&journal_dir.join("socket"));
        let syslog = bind_datagram(&dir.path().join("log"));
        let config = scene_config(dir.path(), "<syslog/>");
        let syslog_path = dir.path().join("log");
        let args = [
            format!("--config-file={}", config.display()),
            mode.to_owned(),
        ];
        // The syslog socket is offered too: it must stay unused.
        let bus = start_under_journal(dir, &journal_dir, &syslog_path, &args);
        provoke(&bus);
        let entries = journal_entries_until(&journal, |got| {
            got.iter()
                .any(|e| e.get("MESSAGE").is_some_and(|m| m.contains(FAILED)))
                && got
                    .iter()
                    .any(|e| e.get("MESSAGE").is_some_and(|m| m.contains(DENIED)))
        });
        let warning = entry(&entries, "broken.service");
        assert_eq!(warning["PRIORITY"], "4", "{mode}: {warning:?}");
        assert_eq!(warning["SYSLOG_IDENTIFIER"], "quickbus-daemon");
        assert_eq!(warning["SYSLOG_FACILITY"], "3");

        let activating = entry(&entries, ACTIVATING);
        let copies = entries
            .iter()
            .filter(|e| e.get("MESSAGE").is_some_and(|m| m.contains(ACTIVATING)))
            .count();
        assert_eq!(copies, 1, "{mode}: {entries:#?}");
        assert_eq!(activating["PRIORITY"], "6", "{mode}: {activating:?}");
        assert!(activating["DBUS_UNIQUE_NAME"].starts_with(":1."));
        assert_eq!(activating["DBUS_PEER_UID"], "0");
        assert!(activating["DBUS_PEER_PID"].parse::<u32>().is_ok());
        assert!(activating["DBUS_PEER_COMM"].starts_with("dbus-send "));
        assert!(activating["MESSAGE"].contains(&format!(
            "requested by '{}' (uid=0 pid={} comm=\"dbus-send ",
            activating["DBUS_UNIQUE_NAME"], activating["DBUS_PEER_PID"]
        )));

        let denied = entry(&entries, DENIED);
        assert_eq!(denied["PRIORITY"], "5", "{mode}: {denied:?}");
        assert_eq!(denied["SYSLOG_FACILITY"], "4");
        assert!(denied["DBUS_UNIQUE_NAME"].starts_with(":1."));

        assert_eq!(bus.log(), "", "{mode}: the journal replaces stderr text");
        assert!(
            syslog
                .datagrams
                .recv_timeout(Duration::from_millis(200))
                .is_err(),
            "{mode}: a line went to syslog as well as the journal"
        );
    }
}

#[test]
fn a_client_that_exits_with_replies_unread_is_no_warning() {
    let bus = Bus::start();
    let mut watcher = Connection::connect_with_timeout(bus.address(), TIMEOUT).unwrap();
    watcher.set_timeout(Some(TIMEOUT)).unwrap();
    let mut leaver = Connection::connect_with_timeout(bus.address(), TIMEOUT).unwrap();
    let name = leaver.unique_name().to_owned();
    watcher
        .add_match(&format!(
            "type='signal',member='NameOwnerChanged',arg0='{name}'"
        ))
        .unwrap();
    leaver
        .send(
            MessageBuilder::method_call("/org/freedesktop/DBus", "GetId")
                .interface("org.freedesktop.DBus")
                .destination("org.freedesktop.DBus"),
            &[],
        )
        .unwrap();
    // Wait until the reply sits unread in the leaver's socket, then close:
    // the bus's next read of it fails with ECONNRESET.
    let fd = leaver.as_fd();
    let mut poll = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let ready = rustix::event::poll(&mut poll, TIMEOUT.as_millis() as i32).unwrap();
    assert_eq!(ready, 1, "the reply never came");
    drop(leaver);
    // The bus has handled the close once it announces the name is gone.
    loop {
        let (message, _) = watcher.receive().expect("NameOwnerChanged for the leaver");
        if message.member() == Some("NameOwnerChanged") {
            break;
        }
    }
    let log = bus.log();
    assert!(
        !log.contains(&format!("disconnecting {name}")),
        "a normal exit was logged as a problem: {log}"
    );
}

/// The bus core's own warnings go through the daemon's rate limit: a peer
/// forging systemd's ActivationFailure signal 50 times gets at most the
/// limit's 5 lines into the log (the count of lines, not a time, is
/// checked: the interval is 10 s, far longer than this takes).
#[test]
fn a_peer_repeating_a_core_warning_is_rate_limited() {
    if skip::quickbus_only("quickbus's log rate limit") {
        return;
    }
    const FORGED: &str = "ignoring forged ActivationFailure";
    const TIMES: usize = 50;
    const LIMIT: usize = 5; // crates/daemon/src/log_limit.rs BURST
    let bus = Bus::start();
    let mut forger = bus.connect();
    for _ in 0..TIMES {
        forger
            .send(
                MessageBuilder::signal(
                    "/org/freedesktop/systemd1",
                    "org.freedesktop.systemd1.Activator",
                    "ActivationFailure",
                )
                .destination("org.freedesktop.DBus")
                .body(vec![
                    quickbus_wire::Value::String("x.service".into()),
                    quickbus_wire::Value::String("org.example.Error".into()),
                    quickbus_wire::Value::String("forged".into()),
                ]),
                &[],
            )
            .unwrap();
    }
    // The bus handles one connection's messages in order: once this is
    // answered, every forged signal was seen (and logged or counted).
    forger.get_id().expect("GetId after the forged signals");
    let log = bus.log();
    let lines = log.lines().filter(|l| l.contains(FORGED)).count();
    assert!(
        (1..=LIMIT).contains(&lines),
        "{lines} lines for {TIMES} forged signals (at most {LIMIT}):\n{log}"
    );
}

/// Policy denials, the daemon's cheapest line to provoke (one per call,
/// answered at once): each names the call's member, `Call<n>`.
const FLOOD_INTERFACE: &str = "org.example.Flood";
/// Far more lines than a pipe (64 KiB), a datagram socket's queue and the
/// daemon's own queue of 1,024 lines (crates/daemon/src/logging/queue.rs
/// BOUND) hold together.
const FLOOD_CALLS: usize = 3000;
const LOST: &str = " log lines were lost: the log did not take them in time";

fn flood_config(dir: &Path) -> std::path::PathBuf {
    write_config_with(
        dir,
        Listen::UnixPath,
        &format!(
            r#"<policy context="mandatory">
    <deny send_destination="org.freedesktop.DBus" send_interface="{FLOOD_INTERFACE}"/>
  </policy>"#
        ),
    )
}

/// Make the bus log [`FLOOD_CALLS`] lines, one call at a time: each call
/// must be answered (its denial), however the log is doing.
fn flood(bus: &Bus) {
    let mut caller = bus.connect();
    for n in 0..FLOOD_CALLS {
        let refused = caller
            .call(
                MessageBuilder::method_call("/org/freedesktop/DBus", format!("Call{n}"))
                    .interface(FLOOD_INTERFACE)
                    .destination("org.freedesktop.DBus"),
            )
            .expect_err("a denied call");
        assert_eq!(
            refused.dbus_name(),
            Some("org.freedesktop.DBus.Error.AccessDenied"),
            "call {n}: {refused}"
        );
    }
}

/// The calls whose denial lines are in `lines`, in their order, and the
/// lines the daemon says it lost.
fn flood_lines(lines: &[String]) -> (Vec<usize>, usize) {
    let call = |line: &str| {
        let (_, after) = line.split_once(r#"member="Call"#)?;
        after.split('"').next()?.parse::<usize>().ok()
    };
    let lost = |line: &str| {
        let before = &line[..line.find(LOST)?];
        before.rsplit(' ').next()?.parse::<usize>().ok()
    };
    let calls = lines.iter().filter_map(|l| call(l)).collect();
    let lost = lines.iter().filter_map(|l| lost(l)).sum();
    (calls, lost)
}

/// Every call's line is there in order, once, or counted as lost (and
/// some were: the sink took nothing for a while).
fn assert_in_order_or_counted(lines: &[String]) {
    let (calls, lost) = flood_lines(lines);
    assert!(
        calls.windows(2).all(|w| w[0] < w[1]),
        "lines out of order or doubled: {calls:?}"
    );
    assert!(lost > 0, "no line says lines were lost: {lines:#?}");
    assert_eq!(
        calls.len() + lost,
        FLOOD_CALLS,
        "{} lines written, {lost} counted as lost",
        calls.len()
    );
}

/// Whether `lines` hold every call's line or its count as lost.
fn flood_accounted(lines: &[String]) -> bool {
    let (calls, lost) = flood_lines(lines);
    lost > 0 && calls.len() + lost >= FLOOD_CALLS
}

/// A `--syslog-only` bus whose syslog socket nobody reads, after
/// [`flood`]: its log's thread is blocked in the socket, its queue full.
fn flooded_with_a_syslog_that_takes_nothing() -> (Bus, UnixDatagram) {
    let dir = TempDir::new();
    let unread = bind_unread(&dir.path().join("log"));
    let config = flood_config(dir.path());
    let bus = start_syslog_only(dir, &config, Command::new(daemon_path()));
    flood(&bus);
    (bus, unread)
}

/// The flood's lines, read from `unread` until every call's is
/// there or counted as lost.
fn flood_read(unread: UnixDatagram) -> Vec<String> {
    let syslog = read_in_background(unread);
    texts(&receive_until(&syslog, |got| flood_accounted(&texts(got))))
}

/// A syslog daemon that takes nothing (its socket's queue full) stops
/// the log, not the bus: every call is answered, and the lines that did
/// not fit the daemon's queue are counted in a line of their own.
#[test]
fn a_syslog_that_takes_nothing_does_not_stop_the_bus() {
    if skip::quickbus_only("quickbus's log thread") {
        return;
    }
    let (_bus, unread) = flooded_with_a_syslog_that_takes_nothing();
    let lines = flood_read(unread);
    assert_in_order_or_counted(&lines);
    let lost = line_with(&lines, LOST);
    assert!(
        lost.starts_with("<28>"),
        "a warning of facility daemon: {lost}"
    );
}

/// A restart while the log's sink takes nothing: the log's thread, blocked
/// in the sink, cannot be ended before the fork that checks the state, so
/// the restart is refused (the Restart caller is told why) and the bus
/// serves on as it was; the lines arrive once the sink reads again.
#[test]
fn a_restart_while_the_log_takes_nothing_is_refused_and_the_bus_serves_on() {
    if skip::quickbus_only("quickbus's log thread and restart in place") {
        return;
    }
    let (bus, unread) = flooded_with_a_syslog_that_takes_nothing();
    let pid = bus.pid();
    let mut admin = bus.connect();
    let refused = admin
        .call(
            MessageBuilder::method_call("/org/freedesktop/DBus", "Restart")
                .interface("org.quickbus.Daemon1")
                .destination("org.freedesktop.DBus"),
        )
        .expect_err("a restart refused while the log's thread cannot end");
    let why = refused.to_string();
    assert!(
        why.contains("Restart refused") && why.contains("the log's thread is still writing"),
        "{why}"
    );
    // The same process serves, with every name it had.
    assert_eq!(bus.pid(), pid);
    let names = admin
        .call(
            MessageBuilder::method_call("/org/freedesktop/DBus", "ListNames")
                .interface("org.freedesktop.DBus")
                .destination("org.freedesktop.DBus"),
        )
        .expect("ListNames after the refused restart");
    assert!(format!("{names:?}").contains("org.freedesktop.DBus"));
    let lines = flood_read(unread);
    // The flood's lines in order, each once or counted (the counts also
    // take in the restart's own lines, lost behind the flood).
    let (calls, lost) = flood_lines(&lines);
    assert!(
        calls.windows(2).all(|w| w[0] < w[1]),
        "lines out of order or doubled: {calls:?}"
    );
    assert!(calls.len() + lost >= FLOOD_CALLS, "{lines:#?}");
}

/// The same for a standard error that is a pipe nobody reads (a FIFO
/// here, which the test opens but reads only after the calls).
#[test]
fn a_stderr_nobody_reads_does_not_stop_the_bus() {
    if skip::quickbus_only("quickbus's log thread") {
        return;
    }
    use std::io::BufRead;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = TempDir::new();
    let fifo = dir.path().join("stderr");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    // Opened without waiting for a writer; blocking for the reads later.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .expect("the FIFO's read end");
    let config = flood_config(dir.path());
    let mut cmd = Command::new("sh");
    cmd.args(["-c", r#"exec "$@" 2>"$0""#])
        .arg(&fifo)
        .arg(daemon_path());
    let bus = Bus::start_command(dir, cmd, &[format!("--config-file={}", config.display())]);
    flood(&bus);
    rustix::fs::fcntl_setfl(&reader, rustix::fs::OFlags::empty()).expect("blocking reads");
    let (sender, received) = mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end (the daemon's exit), so that it never waits.
        for line in std::io::BufReader::new(reader).lines() {
            let Ok(line) = line else { return };
            let _ = sender.send(line);
        }
    });
    let give_up = Instant::now() + TIMEOUT;
    let mut lines = Vec::new();
    while !flood_accounted(&lines) {
        let left = give_up.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => panic!("gave up waiting; got {lines:#?}"),
        }
    }
    assert_in_order_or_counted(&lines);
    let lost = line_with(&lines, LOST);
    assert!(
        lost.starts_with(&format!("quickbus-daemon[{}]: ", bus.pid())),
        "{lost}"
    );
}

/// A line logged before the bus drops to its `<user>` (here the test
/// hook's warning on syslog, and the open-file limit at debug level)
/// starts the log's thread while the daemon is still root. The user
/// change is per thread (raw system calls), so the daemon ends that
/// thread first: afterwards no thread of the bus keeps root's ids or
/// capabilities.
#[test]
fn no_thread_of_a_bus_that_switched_user_keeps_root() {
    if skip::quickbus_only("the log's thread and <user>")
        || skip::unless(
            quickbus_e2e::can_change_user(),
            "needs root, to start a bus that switches to <user>",
        )
    {
        return;
    }
    let dir = TempDir::new();
    let syslog = bind_datagram(&dir.path().join("log"));
    let config = write_config_with(dir.path(), Listen::UnixPath, "<user>nobody</user>");
    let mut cmd = Command::new(daemon_path());
    cmd.env(SYSLOG_ENV, dir.path().join("log"))
        .env("QUICKBUS_LOG", "debug");
    let bus = Bus::start_command(
        dir,
        cmd,
        &[
            format!("--config-file={}", config.display()),
            "--syslog".into(),
        ],
    );
    // Its loop runs, so it has switched; and the line from before the
    // switch went out through the log's thread.
    let mut client = bus.connect();
    client.get_id().expect("the bus serves");
    receive_until(&syslog, |got| has(&texts(got), "is set: a hook"));
    let (uid, _) = quickbus_e2e::NOBODY;
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", bus.pid())).unwrap() {
        let task = task.unwrap().path();
        let Ok(status) = std::fs::read_to_string(task.join("status")) else {
            continue; // a thread that ended meanwhile
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_default()
                .trim()
                .to_owned()
        };
        threads.push((field("Name:"), field("Uid:"), field("CapEff:")));
    }
    let ids = format!("{uid}\t{uid}\t{uid}\t{uid}");
    assert!(!threads.is_empty());
    for (name, uids, caps) in &threads {
        assert!(
            *uids == ids && caps.trim_start_matches('0').is_empty(),
            "thread {name:?} runs with uids {uids:?} and capabilities {caps}; all threads: {threads:#?}"
        );
    }
}

/// With `--fork`, the parent exits once the daemon is ready, and the
/// daemon then points its standard error at /dev/null: the start-up
/// warnings it logged before it was ready (here one per service file it
/// cannot read) are written to the standard error it was started with
/// before that, every one of them, however far behind the log's thread
/// was. (Before the daemon drained its log first, the last of them went
/// to /dev/null in about one run of three here.)
#[test]
fn a_forked_daemons_start_up_warnings_reach_its_first_stderr() {
    if skip::quickbus_only("the log's thread and --fork") {
        return;
    }
    const BROKEN: usize = 1000;
    let dir = TempDir::new();
    let services = dir.path().join("services");
    std::fs::create_dir_all(&services).unwrap();
    for n in 0..BROKEN {
        // Long names, so the warnings are long lines.
        let name = format!("broken{n}-{}.service", "x".repeat(200));
        std::fs::write(services.join(name), "not one\n").unwrap();
    }
    let config = write_config_with(
        dir.path(),
        Listen::UnixPath,
        &format!("<servicedir>{}</servicedir>", services.display()),
    );
    // Standard error is a pipe (run_bounded's), so the log's thread
    // writes it; read to the end, which comes when the daemon detaches.
    let started = run_bounded(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .args(["--fork", "--print-pid"]),
    )
    .success();
    let pid: u32 = started.stdout.trim().parse().expect("a pid");
    let _daemon = ForkedDaemon(pid);
    let warned = started
        .stderr
        .lines()
        .filter(|l| l.contains("/broken") && l.contains(".service"))
        .count();
    assert_eq!(warned, BROKEN, "stderr:\n{}", started.stderr);
}

/// A restart's exec that could not write every queued line tells the new
/// image how many in `QUICKBUS_LOG_LOST`; the new image counts them as
/// lost on its log, first thing, as any lines the log could not take.
/// (Here the variable is set by the test, on a fresh start: the new
/// image's side of it.)
#[test]
fn lines_an_exec_left_unwritten_are_counted_by_the_new_image() {
    if skip::quickbus_only("QUICKBUS_LOG_LOST") {
        return;
    }
    let dir = TempDir::new();
    let config = write_config_with(dir.path(), Listen::UnixPath, "");
    let mut cmd = Command::new(daemon_path());
    cmd.env("QUICKBUS_LOG_LOST", "17");
    let bus = Bus::start_command(dir, cmd, &[format!("--config-file={}", config.display())]);
    let log = bus.log();
    let first = log.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "quickbus-daemon[{}]: 17 log lines were lost: the log did not take them in time",
            bus.pid()
        ),
        "{log}"
    );
}
