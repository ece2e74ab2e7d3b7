//! Restarting the bus in place (docs/restart.md): SIGUSR2 or `quickbus
//! restart` re-executes the daemon in the same process, and every client
//! (python3-dbus, gdbus, busctl, an sd-bus program, dbus-monitor, the
//! repository's client, raw sockets halfway through SASL) keeps its
//! connection, names, match rules and calls. The last test runs the same
//! scenario against dbus-daemon, which cannot survive it.

#[path = "restart/support.rs"]
mod support;

#[path = "containers/support.rs"]
mod container_support;
#[path = "restart/containers.rs"]
mod containers;
#[allow(dead_code)]
#[path = "threads/held_senders.rs"]
mod held_senders;
#[path = "restart/legitimate_states.rs"]
mod legitimate_states;
#[path = "restart/parsed_ahead.rs"]
mod parsed_ahead;
#[path = "restart/privileges.rs"]
mod privileges;
#[path = "restart/queued_behind.rs"]
mod queued_behind;
#[path = "restart/refused_state.rs"]
mod refused_state;
#[path = "restart/services.rs"]
mod services;
#[path = "restart/signals.rs"]
mod signals;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;

use quickbus_client::{bus_call, Connection, Message, MessageBuilder, MessageType, Value};
use quickbus_e2e::{
    copy_executable, quickbus_daemon_path, read_raw_message, run_bounded, running, skip,
    terminate_and_wait, write_config, write_executable, write_reference_config, Background, Bus,
    Listen, Peer, TempDir, TIMEOUT,
};
use rustix::process::{kill_process, Pid, Signal};
use support::{
    exe_of, quickbus_restart, restart, restart_by_call, restart_by_signal, restart_call,
    restarts_logged, sd_bus_ping, signal_restart, tool, wait_for_log,
};

const KEEP: &str = "com.example.Keep";
const SIGNALS: &str = "com.example.Restart";

/// `peer` emits the signal `SIGNALS.member` from `path`, carrying `args`
/// (peer.py's `[[signature, value], ...]`).
fn emit(peer: &mut Peer, path: &str, member: &str, args: &str) {
    peer.emit(&format!(
        r#"{{"path": "{path}", "iface": "{SIGNALS}", "member": "{member}", "args": {args}}}"#
    ));
}

/// The owner of `name`, asked with dbus-send (libdbus).
fn owner_by_dbus_send(bus: &Bus, name: &str) -> String {
    let out = bus
        .run(
            "dbus-send",
            &[
                "--session",
                "--print-reply=literal",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.GetNameOwner",
                &format!("string:{name}"),
            ],
        )
        .success();
    out.stdout.trim().to_owned()
}

/// Every name on the bus but the unique names of short-lived clients.
fn well_known_names(conn: &mut Connection) -> Vec<String> {
    let reply = conn.call(bus_call("ListNames")).expect("ListNames");
    let Some(Value::Array { items, .. }) = reply.body_values().unwrap().into_iter().next() else {
        panic!("ListNames reply");
    };
    let mut names: Vec<String> = items
        .into_iter()
        .filter_map(|v| match v {
            Value::String(s) if !s.starts_with(':') => Some(s),
            _ => None,
        })
        .collect();
    names.sort();
    names
}

#[test]
fn clients_keep_their_names_match_rules_and_calls_across_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    // python3-dbus: owns a name, serves an object, subscribes to signals.
    let mut python = bus.peer();
    assert_eq!(python.request_name(KEEP, 0), 1);
    python.serve("/keep");
    python.add_match(&format!("type='signal',interface='{SIGNALS}'"));
    // gdbus: a long-lived subscriber to the signals of that name.
    let mut gdbus = bus.spawn("gdbus", &["monitor", "--session", "--dest", KEEP]);
    gdbus.wait_for_line(|l| l.contains(KEEP));
    // The repository's client: a name of its own and a rule.
    let mut client = bus.connect();
    client
        .request_name("com.example.KeepToo", 0)
        .expect("RequestName");
    client
        .add_match(&format!("type='signal',interface='{SIGNALS}'"))
        .expect("AddMatch");
    let python_name = python.unique_name().to_owned();
    let client_name = client.unique_name().to_owned();
    let names_before = well_known_names(&mut client);

    for i in 0..6 {
        restart(&bus, i);
        // Names and their owners are as they were.
        assert_eq!(owner_by_dbus_send(&bus, KEEP), python_name);
        assert_eq!(
            client.get_name_owner("com.example.KeepToo").unwrap(),
            client_name
        );
        assert_eq!(well_known_names(&mut client), names_before);
        // The owner's signal reaches every match rule: python's own,
        // gdbus's, and the client's.
        let member = format!("After{i}");
        emit(&mut python, "/keep", &member, &format!(r#"[["u", {i}]]"#));
        python.wait_event(|e| e.contains(&format!("{SIGNALS}.{member}")));
        gdbus.wait_for_line(|l| l.contains(&format!("{SIGNALS}.{member}")));
        loop {
            let (msg, _) = client.receive().expect("the client's signal");
            if msg.member() == Some(member.as_str()) {
                assert_eq!(msg.sender(), Some(python_name.as_str()));
                break;
            }
        }
        // busctl (sd-bus) calls the kept name, and python answers.
        let echo = bus
            .run(
                "busctl",
                &[
                    "--user",
                    "call",
                    KEEP,
                    "/keep",
                    "com.example.Test",
                    "Echo",
                    "s",
                    &format!("round {i}"),
                ],
            )
            .success();
        assert_eq!(echo.stdout.trim(), format!("s \"round {i}\""));
    }
    assert_eq!(restarts_logged(&bus), 6, "log:\n{}", bus.log());
}

#[test]
fn the_bus_id_is_not_the_address_guid_and_survives_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    let mut client = bus.connect();
    let id = client.get_id().expect("GetId");
    // As dbus-daemon's: a UUID of the bus's own, not its address's GUID
    // (tests/differential compares the two daemons on this).
    let guid = bus.address().rsplit("guid=").next().unwrap_or_default();
    assert_eq!(id.len(), 32, "{id}");
    assert_ne!(id, guid, "GetId answered the address's GUID");
    for i in 0..3 {
        restart(&bus, i);
        assert_eq!(client.get_id().expect("GetId after a restart"), id);
        assert_eq!(bus.connect().get_id().expect("a new client's GetId"), id);
    }
}

#[test]
fn a_call_pending_across_a_restart_gets_its_reply() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    let mut service = bus.connect();
    assert_eq!(service.request_name("com.example.Slow", 0).unwrap(), 1);
    let mut caller = bus.peer();
    caller.send("call com.example.Slow /slow com.example.Slow Wait - []");
    // The call is with the service; the reply is not sent yet.
    let call = loop {
        let (msg, _) = service.receive().expect("the call");
        if msg.member() == Some("Wait") {
            break msg;
        }
    };
    restart_by_signal(&bus);
    restart_by_call(&bus);
    let reply = MessageBuilder::method_return(call.serial())
        .destination(call.sender().expect("a sender"))
        .body(vec![Value::String("worth the wait".into())]);
    service.send(reply, &[]).expect("the reply");
    assert_eq!(caller.result(), r#"call "worth the wait""#);
}

#[test]
fn a_signal_burst_crossing_ten_restarts_arrives_whole_and_in_order() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    signal_burst_crossing_ten_restarts(Bus::start(), 3);
}

/// The same with worker threads making the reads and writes (issue 27),
/// and receivers enough that each turn's writes go to the workers: each
/// restart happens between turns, with the workers idle.
#[test]
fn a_signal_burst_crossing_ten_restarts_with_worker_threads_arrives_whole_and_in_order() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    signal_burst_crossing_ten_restarts(
        Bus::start_with_config(Listen::UnixPath, r#"<limit name="threads">4</limit>"#),
        10,
    );
}

fn signal_burst_crossing_ten_restarts(bus: Bus, receiver_count: usize) {
    const COUNT: u32 = 100_000;
    let rule = format!("type='signal',interface='{SIGNALS}',member='Seq'");
    let mut receivers = Vec::new();
    for _ in 0..receiver_count {
        let mut conn = bus.connect();
        conn.add_match(&rule).expect("AddMatch");
        receivers.push(thread::spawn(move || {
            let mut next = 0u32;
            while next < COUNT {
                let (msg, _) = conn.receive().expect("a signal");
                if msg.member() != Some("Seq") {
                    continue;
                }
                let seq = match msg.body_values().unwrap().first() {
                    Some(Value::Uint32(n)) => *n,
                    other => panic!("Seq carries {other:?}"),
                };
                assert_eq!(seq, next, "signal {seq} arrived where {next} was due");
                next += 1;
            }
            next
        }));
    }
    let mut sender = bus.connect();
    let (progress, sent) = mpsc::channel();
    let (go, wait_for_go) = mpsc::channel::<()>();
    let sending = thread::spawn(move || {
        for seq in 0..COUNT {
            let signal =
                MessageBuilder::signal("/burst", SIGNALS, "Seq").body(vec![Value::Uint32(seq)]);
            sender.send(signal, &[]).expect("the sender sees no error");
            // Every tenth of the burst, a restart is asked for and the
            // burst goes on while it happens.
            if seq % (COUNT / 10) == COUNT / 20 {
                progress.send(seq).expect("the test waits");
                wait_for_go.recv().expect("the test goes on");
            }
        }
        // A round trip: the bus has taken every signal.
        sender.get_id().expect("GetId after the burst");
    });
    let mut admin = bus.connect();
    for i in 0..10usize {
        sent.recv_timeout(TIMEOUT).expect("the sender's progress");
        let before = restarts_logged(&bus);
        if i.is_multiple_of(2) {
            signal_restart(&bus);
            go.send(()).unwrap();
        } else {
            let serial = admin.send(restart_call(), &[]).expect("Restart");
            go.send(()).unwrap();
            admin.wait_reply(serial).expect("the restart is done");
        }
        wait_for_log(&bus, support::RESTARTED, before + 1);
    }
    sending.join().expect("the sender");
    for receiver in receivers {
        assert_eq!(receiver.join().expect("a receiver"), COUNT);
    }
    assert_eq!(restarts_logged(&bus), 10, "log:\n{}", bus.log());
}

/// Small socket buffers: most of what is sent to a receiver that does
/// not read waits in the bus.
const SMALL_SOCKET_BUFFERS: &str = r#"<limit name="socket_buffer_bytes">16384</limit>"#;

/// A bus with [`SMALL_SOCKET_BUFFERS`].
fn bus_that_queues() -> Bus {
    Bus::start_with_config(Listen::UnixPath, SMALL_SOCKET_BUFFERS)
}

#[test]
fn queued_messages_a_half_written_one_and_their_fds_cross_a_restart() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    const BULK: usize = 10;
    const SIZE: usize = 60_000;
    let bus = bus_that_queues();
    // A receiver that reads nothing until after the restarts.
    let mut receiver = bus.connect();
    assert!(receiver.can_pass_fds());
    let dest = receiver.unique_name().to_owned();
    let mut sender = bus.connect();
    for i in 0..BULK {
        let bulk = MessageBuilder::signal("/q", SIGNALS, "Bulk")
            .destination(dest.clone())
            .body(vec![
                Value::Uint32(i as u32),
                Value::Array {
                    elem_sig: "y".into(),
                    items: vec![Value::Byte(i as u8); SIZE],
                },
            ]);
        sender.send(bulk, &[]).unwrap();
    }
    let (read_end, mut write_end) = std::os::unix::net::UnixStream::pair().unwrap();
    write_end.write_all(b"through the restart").unwrap();
    drop(write_end);
    let with_fd = MessageBuilder::signal("/q", SIGNALS, "WithFd")
        .destination(dest.clone())
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)]);
    use std::os::fd::AsFd;
    sender.send(with_fd, &[read_end.as_fd()]).unwrap();
    drop(read_end);
    // The bus has taken everything; what the receiver's socket did not
    // take waits in the bus, a message written halfway among it.
    sender.get_id().unwrap();
    assert!(
        quickbus_e2e::connection_stat(&mut sender, &dest, "QueuedBytes") > 0,
        "nothing waits in the bus: the test would prove nothing"
    );
    restart_by_signal(&bus);
    restart_by_call(&bus);
    for i in 0..BULK {
        let (msg, _) = loop {
            let (msg, fds) = receiver.receive().expect("a queued message");
            if msg.member() == Some("Bulk") {
                break (msg, fds);
            }
        };
        let values = msg.body_values().unwrap();
        assert_eq!(values[0], Value::Uint32(i as u32));
        match &values[1] {
            Value::Array { items, .. } => {
                assert_eq!(items.len(), SIZE);
                assert!(items.iter().all(|b| *b == Value::Byte(i as u8)));
            }
            other => panic!("Bulk carries {other:?}"),
        }
    }
    let (msg, fds) = receiver.receive().expect("the message with an fd");
    assert_eq!(msg.member(), Some("WithFd"));
    assert_eq!(fds.len(), 1);
    let mut text = String::new();
    std::fs::File::from(fds.into_iter().next().unwrap())
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, "through the restart");
}

/// How many of the daemon's descriptors name what `names` accepts (the
/// target of the /proc/PID/fd link). Counting only these, not every
/// descriptor, leaves out what the daemon inherited from the test's own
/// parents, which a restart does not pass on.
fn fds_naming(pid: u32, names: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's fd table")
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter(|target| names(&target.to_string_lossy()))
        .count()
}

/// The handover memfds the daemon holds.
fn handover_memfds(pid: u32) -> usize {
    fds_naming(pid, |name| name.starts_with("/memfd:quickbus-handover"))
}

#[test]
fn a_broadcast_queued_for_many_receivers_stays_one_message_across_restarts() {
    // Issue 24: a restart carried one copy of a broadcast, and of its
    // fds, per receiver (the new image held a duplicate of each fd for
    // every receiver). The bulk signal is large enough that the new image
    // reads it in place from the handover's memfd (docs/restart.md).
    if skip::quickbus_only("restarting in place") {
        return;
    }
    const RECEIVERS: usize = 8;
    const SIZE: usize = 300_000;
    let bus = bus_that_queues();
    let rule = format!("type='signal',interface='{SIGNALS}'");
    let mut receivers: Vec<Connection> = (0..RECEIVERS)
        .map(|_| {
            let mut receiver = bus.connect();
            assert!(receiver.can_pass_fds());
            receiver.add_match(&rule).unwrap();
            receiver
        })
        .collect();
    let mut sender = bus.connect();
    // A bulk signal the receivers' sockets cannot take whole, so that the
    // one with the fd waits in the bus behind it.
    let bulk = MessageBuilder::signal("/q", SIGNALS, "Bulk").body(vec![Value::Array {
        elem_sig: "y".into(),
        items: vec![Value::Byte(7); SIZE],
    }]);
    sender.send(bulk, &[]).unwrap();
    let dir = TempDir::new();
    let path = dir.path().join("shared");
    std::fs::write(&path, "one file for every receiver").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    use std::os::unix::fs::MetadataExt;
    let inode = file.metadata().unwrap().ino();
    let with_fd = MessageBuilder::signal("/q", SIGNALS, "WithFd")
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)]);
    use std::os::fd::AsFd;
    sender.send(with_fd, &[file.as_fd()]).unwrap();
    drop(file);
    sender.get_id().unwrap();
    let shared_file = path.to_string_lossy().into_owned();
    let the_shared_file = |name: &str| name == shared_file;
    assert_eq!(fds_naming(bus.pid(), the_shared_file), 1);
    restart_by_signal(&bus);
    restart_by_signal(&bus);
    // A round trip through the new image's loop: the restart is logged
    // before the new image has let go of the handover's descriptor it
    // inherited (a second one of the memfd its buffers map), which it
    // does before its loop runs. Without it the count below raced that
    // (2 instead of 1, mostly with a thread pool writing the first
    // flush to the eight receivers).
    sender.get_id().unwrap();
    // The message's fd is still one descriptor of the daemon's, not one
    // per receiver; and the bulk signal lies in one handover memfd until
    // every receiver has it.
    assert_eq!(
        fds_naming(bus.pid(), the_shared_file),
        1,
        "log:\n{}",
        bus.log()
    );
    assert_eq!(handover_memfds(bus.pid()), 1, "log:\n{}", bus.log());
    for receiver in &mut receivers {
        let mut next = || loop {
            let (msg, fds) = receiver.receive().expect("a queued signal");
            // NameAcquired and the like come first.
            if msg.interface() == Some(SIGNALS) {
                break (msg, fds);
            }
        };
        let (msg, _) = next();
        assert_eq!(msg.member(), Some("Bulk"));
        assert_eq!(msg.body().len(), 4 + SIZE);
        assert!(msg.body()[4..].iter().all(|&b| b == 7));
        let (msg, fds) = next();
        assert_eq!(msg.member(), Some("WithFd"));
        assert_eq!(fds.len(), 1);
        let received = std::fs::File::from(fds.into_iter().next().unwrap());
        assert_eq!(received.metadata().unwrap().ino(), inode);
    }
    // Delivered everywhere, the message and its memfd are gone (the fd
    // a moment later: the bus closes the fds clients pass on a thread of
    // its own, docs/reliability.md, "Fds clients pass").
    sender.get_id().unwrap();
    let began = std::time::Instant::now();
    while fds_naming(bus.pid(), the_shared_file) != 0 {
        assert!(began.elapsed() < TIMEOUT, "the bus kept the shared file");
        thread::sleep(quickbus_e2e::POLL_INTERVAL);
    }
    assert_eq!(handover_memfds(bus.pid()), 0, "log:\n{}", bus.log());
}

#[test]
fn an_sd_bus_ping_pong_loop_sees_no_error() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    let program = sd_bus_ping(bus.dir());
    let mut pinger = Background::spawn(Command::new(&program).arg(bus.address()));
    let ready = pinger.read_line();
    assert!(ready.starts_with("ready :1."), "{ready}");
    for i in 0..6 {
        restart(&bus, i);
    }
    pinger.close_stdin();
    let calls = pinger.read_line();
    let status = pinger.wait();
    assert!(status.success(), "sd-bus saw an error: {}", pinger.stderr());
    assert!(calls.starts_with("calls "), "{calls}");
}

/// A raw connection to the bus's socket.
fn raw(bus: &Bus) -> UnixStream {
    let stream = UnixStream::connect(bus.dir().join("bus")).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream
}

fn read_line(stream: &mut UnixStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        stream.read_exact(&mut byte).expect("a SASL line");
        line.push(byte[0]);
    }
    String::from_utf8(line).unwrap()
}

fn uid_hex() -> String {
    rustix::process::getuid()
        .as_raw()
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// BEGIN, then Hello: the unique name the bus gave.
fn begin_and_hello(stream: &mut UnixStream) -> String {
    stream.write_all(b"BEGIN\r\n").unwrap();
    let hello = bus_call("Hello").build(1).expect("Hello");
    stream.write_all(&hello).unwrap();
    let reply = read_raw_message(stream);
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
    match reply.body_values().unwrap().first() {
        Some(Value::String(name)) => name.clone(),
        other => panic!("Hello returned {other:?}"),
    }
}

#[test]
fn connections_halfway_through_sasl_finish_after_a_restart() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    // Connected, nothing sent.
    let mut silent = raw(&bus);
    // The nul byte and half an AUTH line.
    let mut partial = raw(&bus);
    partial.write_all(b"\0AUTH EXTER").unwrap();
    // Authenticated (OK received), before BEGIN.
    let mut authenticated = raw(&bus);
    authenticated
        .write_all(format!("\0AUTH EXTERNAL {}\r\n", uid_hex()).as_bytes())
        .unwrap();
    let ok = read_line(&mut authenticated);
    assert!(ok.starts_with("OK "), "{ok}");
    // Agreed on fd passing too.
    let mut negotiated = raw(&bus);
    negotiated
        .write_all(format!("\0AUTH EXTERNAL {}\r\nNEGOTIATE_UNIX_FD\r\n", uid_hex()).as_bytes())
        .unwrap();
    assert!(read_line(&mut negotiated).starts_with("OK "));
    assert_eq!(read_line(&mut negotiated), "AGREE_UNIX_FD\r\n");

    restart_by_signal(&bus);
    restart_by_call(&bus);

    silent
        .write_all(format!("\0AUTH EXTERNAL {}\r\n", uid_hex()).as_bytes())
        .unwrap();
    assert!(read_line(&mut silent).starts_with("OK "));
    partial
        .write_all(format!("NAL {}\r\n", uid_hex()).as_bytes())
        .unwrap();
    assert!(read_line(&mut partial).starts_with("OK "));
    let mut names = Vec::new();
    for stream in [
        &mut silent,
        &mut partial,
        &mut authenticated,
        &mut negotiated,
    ] {
        names.push(begin_and_hello(stream));
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 4, "{names:?}");
}

/// A bus whose daemon runs from a copy of the binary in its own directory
/// (which the test may replace): the bus, that directory, the binary.
fn bus_from_a_copied_binary() -> (Bus, std::path::PathBuf, std::path::PathBuf) {
    let dir = TempDir::new();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let daemon = bin.join("quickbus-daemon");
    copy_executable(&quickbus_daemon_path(), &daemon);
    let config = write_config(dir.path(), Listen::UnixPath);
    let bus = Bus::start_command(
        dir,
        Command::new(&daemon),
        &[format!("--config-file={}", config.display())],
    );
    (bus, bin, daemon)
}

#[test]
fn a_restart_runs_the_binary_now_at_the_daemons_path() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let (bus, bin, daemon) = bus_from_a_copied_binary();
    let mut python = bus.peer();
    assert_eq!(python.request_name(KEEP, 0), 1);
    // An upgrade as dpkg does it: a new file renamed over the old one.
    let staged = bin.join("quickbus-daemon.dpkg-new");
    copy_executable(&quickbus_daemon_path(), &staged);
    std::fs::rename(&staged, &daemon).unwrap();
    assert!(
        exe_of(bus.pid()).ends_with("(deleted)"),
        "{}",
        exe_of(bus.pid())
    );
    let pid = bus.pid();
    restart_by_call(&bus);
    assert_eq!(exe_of(pid), daemon.display().to_string());
    assert_eq!(owner_by_dbus_send(&bus, KEEP), python.unique_name());
    assert_eq!(python.command("ping"), "pong");
}

#[test]
fn a_binary_that_cannot_take_over_is_refused_and_the_bus_serves_on() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let (bus, bin, daemon) = bus_from_a_copied_binary();
    let mut python = bus.peer();
    assert_eq!(python.request_name(KEEP, 0), 1);
    let broken = [
        ("a program that fails", "#!/bin/sh\nexit 1\n"),
        ("another handover version", "#!/bin/sh\necho 4294967295\n"),
        ("garbage", "\x7fELF but not really"),
    ];
    let mut refusals = 0;
    for (what, contents) in broken {
        let staged = bin.join("staged");
        write_executable(&staged, contents);
        std::fs::rename(&staged, &daemon).unwrap();
        let refused = quickbus_restart(&bus).failure();
        assert!(
            refused.stderr.contains("Restart refused"),
            "{what}: {refused:#?}"
        );
        signal_restart(&bus);
        refusals += 2;
        wait_for_log(&bus, "restart refused", refusals);
        assert_eq!(
            owner_by_dbus_send(&bus, KEEP),
            python.unique_name(),
            "{what}"
        );
        assert_eq!(python.command("ping"), "pong", "{what}");
    }
    // No file at all.
    std::fs::remove_file(&daemon).unwrap();
    quickbus_restart(&bus).failure();
    wait_for_log(&bus, "restart refused", refusals + 1);
    // The real binary back: the restart happens.
    copy_executable(&quickbus_daemon_path(), &daemon);
    restart_by_call(&bus);
    assert_eq!(owner_by_dbus_send(&bus, KEEP), python.unique_name());
}

#[test]
fn a_new_binary_that_cannot_resume_hands_the_bus_back_to_the_old_one() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let mut daemon = Command::new(quickbus_daemon_path());
    daemon.env("QUICKBUS_TEST_FAIL_RESTORE", "1");
    let bus = Bus::start_command(
        dir,
        daemon,
        &[format!("--config-file={}", config.display())],
    );
    let mut python = bus.peer();
    assert_eq!(python.request_name(KEEP, 0), 1);
    python.add_match(&format!("type='signal',interface='{SIGNALS}'"));
    let failed = quickbus_restart(&bus).failure();
    assert!(
        failed
            .stderr
            .contains("the previous binary serves it again"),
        "{failed:#?}"
    );
    let log = bus.log();
    assert!(log.contains("restoring failed"), "{log}");
    assert!(log.contains("going back to the previous binary"), "{log}");
    // The bus is as it was: the name, the rule, the connection.
    assert_eq!(owner_by_dbus_send(&bus, KEEP), python.unique_name());
    emit(&mut python, "/x", "Back", "[]");
    python.wait_event(|e| e.contains(&format!("{SIGNALS}.Back")));
}

#[test]
fn a_monitor_is_kept_across_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    let mut monitor = bus.spawn(
        "dbus-monitor",
        &["--session", &format!("interface='{SIGNALS}'")],
    );
    let mut python = bus.peer();
    // The monitor is installed once it sees what it asked for.
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        emit(&mut python, "/m", "Before", "[]");
        if monitor
            .try_read_line(std::time::Duration::from_millis(200))
            .is_some_and(|l| l.contains("member=Before"))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "dbus-monitor saw nothing: {}",
            monitor.stderr()
        );
    }
    for i in 0..4 {
        restart(&bus, i);
        let member = format!("After{i}");
        emit(&mut python, "/m", &member, "[]");
        monitor.wait_for_line(|l| l.contains(&format!("member={member}")));
    }
}

#[test]
fn a_second_restart_asked_in_the_same_turn_is_refused() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    let mut admin = bus.connect();
    // Both calls in one write: the bus reads them in one turn.
    let first = restart_call().build(1000).unwrap();
    let second = restart_call().build(1001).unwrap();
    admin.send_batch(&[first, second]).expect("two calls");
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let (msg, _) = admin.receive().expect("an answer");
        if msg.reply_serial().is_some() {
            answers.push(msg);
        }
    }
    answers.sort_by_key(|m| m.reply_serial());
    let [done, refused]: [Message; 2] = answers.try_into().unwrap();
    assert_eq!(done.msg_type(), MessageType::MethodReturn);
    assert_eq!(refused.msg_type(), MessageType::Error);
    assert_eq!(
        refused.error_name(),
        Some("org.freedesktop.DBus.Error.Failed")
    );
    let text = format!("{:?}", refused.body_values().unwrap());
    assert!(text.contains("another restart is in progress"), "{text}");
    assert_eq!(restarts_logged(&bus), 1);
    // Anyone else may not restart the bus.
    if quickbus_e2e::can_change_user() {
        let denied = quickbus_restart_as(bus.address(), quickbus_e2e::NOBODY).failure();
        assert!(denied.stderr.contains("AccessDenied"), "{denied:#?}");
    }
}

/// Waits (bounded) until a process's command line contains `text`;
/// returns its pid.
fn wait_for_process_with(text: &str) -> u32 {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let found = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .find_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                String::from_utf8_lossy(&cmdline)
                    .contains(text)
                    .then_some(pid)
            });
        if let Some(pid) = found {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no process running with {text:?}"
        );
        std::thread::sleep(quickbus_e2e::POLL_INTERVAL);
    }
}

/// A bus whose service directory is `services` (kept by the caller).
fn bus_with_services(services: &TempDir) -> Bus {
    Bus::start_with_config(
        Listen::UnixPath,
        &format!("<servicedir>{}</servicedir>", services.path().display()),
    )
}

fn add_service(services: &TempDir, name: &str, exec: &str) {
    std::fs::write(
        services.path().join(format!("{name}.service")),
        format!("[D-BUS Service]\nName={name}\nExec={exec}\n"),
    )
    .unwrap();
}

#[test]
fn an_activation_under_way_completes_after_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    const SLOW: &str = "org.example.Slow";
    const PATH: &str = "/org/example/Activated";
    const IFACE: &str = "org.example.Activated";
    let services = TempDir::new();
    let gate = services.path().join("gate");
    add_service(
        &services,
        SLOW,
        &format!(
            "{} {} {SLOW} --gate {}",
            quickbus_e2e::python_path().display(),
            quickbus_e2e::python_script("activated.py").display(),
            gate.display()
        ),
    );
    let bus = bus_with_services(&services);
    let mut peer = bus.peer();
    // Messages for the service wait in the bus while it starts; a call
    // among them waits for its reply.
    for text in ["one", "two"] {
        let sent = peer.command(&format!(
            r#"call_noreply {SLOW} {PATH} {IFACE} Echo s ["{text}"]"#
        ));
        assert_eq!(sent, "call_noreply sent");
    }
    // A round trip: the bus holds both for the activation.
    assert_eq!(peer.command("ping"), "pong");
    peer.send(&format!(r#"call {SLOW} {PATH} {IFACE} Echo s ["three"]"#));
    restart_by_signal(&bus);
    restart_by_call(&bus);
    std::fs::write(&gate, b"open").unwrap();
    assert_eq!(peer.result(), r#"call "three""#);
    let log = peer.command(&format!("call {SLOW} {PATH} {IFACE} Log - []"));
    assert_eq!(log, r#"call ["one", "two", "three"]"#);
    peer.command(&format!("call {SLOW} {PATH} {IFACE} Exit - []"));
}

#[test]
fn a_service_started_before_a_restart_is_still_the_bus_s_child() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    // The program exits with status 3 once the gate opens, after the
    // restart: only the bus that started it, by its pid, can tell. (It
    // also ends when the test's directory is gone: a test that failed
    // leaves no process looping behind.)
    let services = TempDir::new();
    let gate = services.path().join("gate");
    add_service(
        &services,
        "org.example.Dies",
        &format!(
            "/bin/sh -c 'while [ ! -e {gate} ]; do [ -d {dir} ] || exit 4; sleep 0.01; done; exit 3'",
            gate = gate.display(),
            dir = services.path().display()
        ),
    );
    let bus = bus_with_services(&services);
    let mut peer = bus.peer();
    peer.send("call org.example.Dies /x org.example.X Y - []");
    // The bus has started the program before it restarts.
    wait_for_process_with(&gate.display().to_string());
    restart_by_signal(&bus);
    restart_by_call(&bus);
    std::fs::write(&gate, b"open").unwrap();
    let failed = peer.result();
    assert!(
        failed.starts_with("error org.freedesktop.DBus.Error.Spawn.ChildExited")
            && failed.contains("exited with status 3"),
        "{failed}"
    );
}

/// `quickbus restart` as `ids`, on the bus at `address` (from a copy of
/// the tool in a directory every user can reach: the checkout may be
/// private).
fn quickbus_restart_as(address: &str, ids: (u32, u32)) -> quickbus_e2e::Finished {
    let dir = TempDir::new();
    let copy = dir.path().join("quickbus");
    copy_executable(&tool(), &copy);
    run_bounded(
        Command::new(&copy)
            .args(["--address", address, "restart"])
            .uid(ids.0)
            .gid(ids.1),
    )
}

#[test]
fn a_system_bus_restarts_for_root_after_dropping_to_its_user() {
    if skip::quickbus_only("restarting in place")
        || skip::unless(
            quickbus_e2e::can_change_user(),
            "needs root, to change users",
        )
    {
        return;
    }
    const SYSTEM_CONF: &str = "/usr/share/dbus-1/system.conf";
    if skip::unless(
        std::path::Path::new(SYSTEM_CONF).exists(),
        "no /usr/share/dbus-1/system.conf (package dbus-daemon)",
    ) {
        return;
    }
    // The distribution's system bus with the package's policy file for
    // the Restart call: the daemon drops to messagebus after binding, and
    // then it is as messagebus that it checks and executes its binary and
    // reads its configuration: copies messagebus can reach, whoever owns
    // the checkout.
    let policy = quickbus_e2e::shared_copy(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../packaging/dbus/org.quickbus.Daemon1.conf"),
    );
    let dir = TempDir::new();
    let daemon = dir.path().join("quickbus-daemon");
    copy_executable(&quickbus_daemon_path(), &daemon);
    let config = dir.path().join("system-restart.conf");
    std::fs::write(
        &config,
        format!(
            "<busconfig><include>{SYSTEM_CONF}</include><include>{}</include></busconfig>",
            policy.display()
        ),
    )
    .unwrap();
    let address = format!("--address=unix:path={}", dir.path().join("bus").display());
    let bus = Bus::start_command(
        dir,
        Command::new(daemon),
        &[
            format!("--config-file={}", config.display()),
            address,
            "--nopidfile".into(),
        ],
    );
    let mut python = bus.peer();
    let before = python.unique_name().to_owned();
    let denied = quickbus_restart_as(bus.address(), quickbus_e2e::NOBODY).failure();
    assert!(denied.stderr.contains("AccessDenied"), "{denied:#?}");
    quickbus_restart_as(bus.address(), (0, 0)).success();
    quickbus_restart_as(bus.address(), (0, 0)).success();
    assert_eq!(restarts_logged(&bus), 2, "log:\n{}", bus.log());
    assert_eq!(python.command("ping"), "pong");
    assert_eq!(python.unique_name(), before);
}

#[test]
fn without_the_packages_policy_file_the_system_bus_refuses_restart_calls() {
    if skip::quickbus_only("restarting in place")
        || skip::unless(
            quickbus_e2e::can_change_user(),
            "needs root, to change users",
        )
    {
        return;
    }
    let dir = TempDir::new();
    let address = format!("--address=unix:path={}", dir.path().join("bus").display());
    let bus = Bus::start_args(dir, &["--system".into(), address, "--nopidfile".into()]);
    // Debian's system.conf alone denies method calls it does not name:
    // the package's policy file (packaging/dbus) is what lets root in.
    let refused = quickbus_restart_as(bus.address(), (0, 0)).failure();
    assert!(
        refused.stderr.contains("AccessDenied") && refused.stderr.contains("org.quickbus.Daemon1"),
        "{refused:#?}"
    );
    assert_eq!(restarts_logged(&bus), 0);
}

/// dbus-daemon started by hand (not [`Bus`], which expects a clean exit).
fn start_dbus_daemon(dir: &std::path::Path) -> (std::process::Child, String) {
    let config = write_reference_config(dir, Listen::UnixPath);
    let mut child = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--print-address"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dbus-daemon (package dbus-daemon)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("dbus-daemon's address");
    (child, line.trim().to_owned())
}

#[test]
fn dbus_daemon_cannot_survive_the_same_scenario() {
    if skip::unless(
        Command::new("dbus-daemon")
            .arg("--version")
            .output()
            .is_ok(),
        "no dbus-daemon (package dbus-daemon)",
    ) {
        return;
    }
    let dir = TempDir::new();
    let (mut daemon, address) = start_dbus_daemon(dir.path());
    let mut client = Connection::connect_with_timeout(&address, TIMEOUT).expect("connect");
    assert_eq!(client.request_name(KEEP, 0).unwrap(), 1);
    client
        .add_match(&format!("type='signal',interface='{SIGNALS}'"))
        .unwrap();
    let unique = client.unique_name().to_owned();
    // dbus-daemon has no restart in place: SIGUSR2 ends it.
    let pid = rustix::process::Pid::from_child(&daemon);
    rustix::process::kill_process(pid, rustix::process::Signal::Usr2).unwrap();
    let status = daemon.wait().unwrap();
    assert!(!status.success(), "dbus-daemon survived SIGUSR2: {status}");
    // Its clients lost their connection...
    assert!(client.get_id().is_err(), "the connection survived");
    // ...and a new dbus-daemon on the same socket (what a restart of the
    // service would do) knows nothing of them: their name is gone.
    let _ = std::fs::remove_file(dir.path().join("bus"));
    let (mut again, address) = start_dbus_daemon(dir.path());
    let mut fresh = Connection::connect_with_timeout(&address, TIMEOUT).expect("connect");
    let lookup = fresh.get_name_owner(KEEP);
    assert!(lookup.is_err(), "{KEEP} still owned: {lookup:?}");
    // Worse, it counts unique names from the start again: the lost
    // client's name goes to someone else, which quickbus never does.
    assert_eq!(fresh.unique_name(), unique);
    let _ = again.kill();
    let _ = again.wait();
}

/// Kills a daemon this test did not start as a child (it forked).
struct StopOnDrop(u32);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if running(self.0) {
            let _ = kill_process(Pid::from_raw(self.0 as i32).unwrap(), Signal::Kill);
        }
    }
}

/// A bus as an init script starts dbus-daemon: forked into the background
/// with a pid file, listening on a unix socket, TCP and nonce-TCP (whose
/// clients authenticate with DBUS_COOKIE_SHA1). Restarts
/// keep the process, a client on each listener, the listeners (new clients
/// are served on each), the nonce file and the pid file; stopping it
/// afterwards still removes the files, as the image that made them would
/// have.
#[test]
fn a_forked_bus_on_every_kind_of_socket_restarts_with_its_files() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let dir = TempDir::new();
    let pid_file = dir.path().join("bus.pid");
    let extra = format!(
        "<auth>DBUS_COOKIE_SHA1</auth>\n  \
         <listen>tcp:host=127.0.0.1,port=0</listen>\n  \
         <listen>nonce-tcp:host=127.0.0.1,port=0</listen>\n  \
         <pidfile>{}</pidfile>",
        pid_file.display()
    );
    let config = quickbus_e2e::write_config_with(dir.path(), Listen::UnixPath, &extra);
    let printed = dir.path().join("address");
    let script = format!(
        "'{}' --config-file='{}' --fork --print-address=8 8>'{}'",
        quickbus_daemon_path().display(),
        config.display(),
        printed.display()
    );
    // The parent returns once the child serves.
    run_bounded(Command::new("sh").arg("-c").arg(&script)).success();
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Not this test's child: should the test fail, nothing else stops it.
    let stop = StopOnDrop(pid);
    let printed = std::fs::read_to_string(&printed).unwrap();
    // Every listener, the last configured first (as dbus-daemon prints it).
    let addresses: Vec<&str> = printed.trim_end().split(';').collect();
    let transports: Vec<&str> = addresses
        .iter()
        .map(|a| a.split(':').next().unwrap())
        .collect();
    assert_eq!(transports, ["nonce-tcp", "tcp", "unix"], "{printed}");
    let nonce_file = addresses[0]
        .split(',')
        .find_map(|pair| pair.strip_prefix("noncefile="))
        .unwrap_or_else(|| panic!("no noncefile in {printed}"))
        .to_owned();
    let nonce = std::fs::read(&nonce_file).unwrap();
    let socket_file = dir.path().join("bus");
    // A client on each listener, owning a name.
    let mut clients: Vec<(Connection, String)> = addresses
        .iter()
        .enumerate()
        .map(|(i, address)| {
            let mut client = Connection::connect(address).expect("connect");
            let name = format!("com.example.On{i}");
            assert_eq!(client.request_name(&name, 0).unwrap(), 1);
            (client, name)
        })
        .collect();

    let unix = addresses[2];
    run_bounded(Command::new(tool()).args(["--address", unix, "restart"])).success();
    kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::Usr2).unwrap();
    // Answered by the image after the signal's (a second request while the
    // signal's restart is under way would be refused, and retried here).
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !run_bounded(Command::new(tool()).args(["--address", unix, "restart"]))
        .status
        .success()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "restart never succeeded"
        );
        thread::sleep(quickbus_e2e::POLL_INTERVAL);
    }

    assert!(running(pid), "the daemon {pid} is gone");
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        pid.to_string()
    );
    assert_eq!(std::fs::read(&nonce_file).unwrap(), nonce);
    for (client, name) in &mut clients {
        let unique = client.unique_name().to_owned();
        assert_eq!(client.get_name_owner(name).unwrap(), unique);
    }
    // New clients on every listener, dbus-send's (libdbus) among them.
    for address in &addresses {
        let names = quickbus_e2e::driver_call(address, "ListNames")
            .success()
            .stdout;
        for i in 0..3 {
            assert!(names.contains(&format!("com.example.On{i}")), "{names}");
        }
    }

    drop(clients);
    terminate_and_wait(pid);
    // Stopped: its pid may be another process's from now on.
    std::mem::forget(stop);
    for file in [&pid_file, &socket_file, Path::new(&nonce_file)] {
        assert!(!file.exists(), "{} left behind", file.display());
    }
}
