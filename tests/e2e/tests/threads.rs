//! Worker threads (issue 27, crates/daemon/src/server/workers.rs): the
//! `threads` limit starts that many threads, a reload resizes them, a
//! restart in place keeps them, and
//! what they read and write (many connections at once, fds included)
//! arrives whole, in the order sent, exactly as with one thread. The
//! order of the whole bus under many senders is checked against an oracle
//! in order_oracle.rs; restarts under load with threads in restart.rs.

#[path = "threads/held_senders.rs"]
mod held_senders;
#[allow(dead_code)]
#[path = "restart/support.rs"]
mod restart_support;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use quickbus_client::{bus_call, Connection, MessageBuilder, Received, Value};
use quickbus_e2e::{
    daemon_path, forced_threads, skip, write_config_with, Bus, Listen, Stopped, TempDir,
    POLL_INTERVAL, TIMEOUT,
};

const INTERFACE: &str = "org.example.Threads";

/// The daemon's hook that replaces the `threads` limit
/// (`server::THREADS_FOR_TESTS` in quickbus-daemon).
const THREADS_HOOK: &str = "QUICKBUS_TEST_THREADS";

fn threads(n: u32) -> String {
    format!(r#"<limit name="threads">{n}</limit>"#)
}

/// The thread ids of the daemon's threads named as its workers are.
fn worker_ids(pid: u32) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the daemon's threads")
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.starts_with("quickbus-io-"))
        })
        .map(|task| task.file_name().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    ids
}

fn workers_of(pid: u32) -> usize {
    worker_ids(pid).len()
}

/// A bus with `count` worker threads, started.
fn bus_with_workers(count: u32) -> Bus {
    let bus = Bus::start_with_config(Listen::UnixPath, &threads(count));
    wait_for_workers(&bus, count as usize);
    bus
}

/// Waits until the daemon has `count` workers (a pool that was dropped
/// ends its threads on their own time).
fn wait_for_workers(bus: &Bus, count: usize) {
    let began = Instant::now();
    loop {
        let now = workers_of(bus.pid());
        if now == count {
            return;
        }
        assert!(
            began.elapsed() < TIMEOUT,
            "{now} worker threads, {count} expected; log:\n{}",
            bus.log()
        );
        thread::sleep(POLL_INTERVAL);
    }
}

fn reload_with(bus: &Bus, limits: &str) {
    write_config_with(bus.dir(), Listen::UnixPath, limits);
    let mut conn = bus.connect();
    conn.call(bus_call("ReloadConfig")).expect("ReloadConfig");
}

#[test]
fn the_threads_limit_starts_its_workers_and_a_reload_resizes_them() {
    if skip::quickbus_only("the threads limit") {
        return;
    }
    let bus = bus_with_workers(3);
    // One thread: the loop does everything itself, as before threads.
    reload_with(&bus, &threads(1));
    wait_for_workers(&bus, 0);
    reload_with(&bus, &threads(2));
    wait_for_workers(&bus, 2);
    // A restart in place reads the configuration again: the new image
    // starts as many.
    restart_support::restart_by_signal(&bus);
    wait_for_workers(&bus, 2);
    // The bus serves on.
    bus.connect().get_id().expect("GetId after the reloads");
}

/// `calls` calls from `caller` to `callee`, `window` in flight at a time so
/// that several wait in the bus at once: each reply carries its call's
/// number back, in order.
fn call_in_windows(caller: &mut Connection, callee: &str, calls: u32, window: u32) {
    let mut next_reply = 0;
    for first in (0..calls).step_by(window as usize) {
        let mut serials = Vec::new();
        for n in first..(first + window).min(calls) {
            let call = MessageBuilder::method_call("/echo", "Echo")
                .interface(INTERFACE)
                .destination(callee.to_owned())
                .body(vec![Value::Uint32(n)]);
            serials.push(caller.send(call, &[]).expect("send a call"));
        }
        for serial in serials {
            let (reply, _) = caller.wait_reply(serial).expect("a reply");
            assert_eq!(
                reply.body_values().unwrap(),
                vec![Value::Uint32(next_reply)]
            );
            next_reply += 1;
        }
    }
}

/// The next message named `member` that `conn` receives (others are
/// skipped), with its fds.
fn next_named(conn: &mut Connection, member: &str) -> Received {
    loop {
        let (message, fds) = conn.receive().expect(member);
        if message.member() == Some(member) {
            return (message, fds);
        }
    }
}

/// Answers `calls` calls named `member`, the `n`th (from 0) with what
/// `answer(n, body, fds)` makes of it; returns how many it answered.
fn answer_calls(
    mut callee: Connection,
    member: &str,
    calls: u32,
    mut answer: impl FnMut(u32, Vec<Value>, Vec<OwnedFd>) -> Vec<Value>,
) -> u32 {
    for n in 0..calls {
        let (call, fds) = next_named(&mut callee, member);
        let body = answer(n, call.body_values().unwrap(), fds);
        let reply = MessageBuilder::method_return(call.serial())
            .destination(call.sender().unwrap().to_owned())
            .body(body);
        callee.send(reply, &[]).expect("send the reply");
    }
    calls
}

/// Answers `calls` Echo calls with their own body; asserts they came
/// numbered in order.
fn echo(callee: Connection, calls: u32) -> u32 {
    answer_calls(callee, "Echo", calls, |n, body, _| {
        assert_eq!(body, vec![Value::Uint32(n)], "calls out of order");
        body
    })
}

/// The inode of `fd`: what tells one socket from another in every
/// process that holds it.
fn inode(fd: impl AsFd) -> u64 {
    rustix::fs::fstat(fd).expect("fstat").st_ino
}

/// Asserts that `fds` is the one socket whose inode `body[at]` names.
fn assert_carries_the_sent_socket(body: &[Value], fds: &[OwnedFd], at: usize) {
    assert_eq!(fds.len(), 1, "{body:?} lost its fd");
    let Value::Uint64(sent) = body[at] else {
        panic!("{body:?} names no inode");
    };
    assert_eq!(inode(&fds[0]), sent, "{body:?} carries another's fd");
}

/// Receives `count` Fd signals numbered from 0, each carrying a socket
/// and its inode as the emitter saw it.
fn receive_fds(mut receiver: Connection, count: u32) -> u32 {
    for n in 0..count {
        let (signal, fds) = next_named(&mut receiver, "Fd");
        let body = signal.body_values().unwrap();
        assert_eq!(body[0], Value::Uint32(n), "signals out of order");
        assert_carries_the_sent_socket(&body, &fds, 1);
    }
    count
}

#[test]
fn pairs_and_a_broadcast_with_fds_cross_the_workers_whole_and_in_order() {
    if skip::quickbus_only("the threads limit") {
        return;
    }
    const PAIRS: usize = 8;
    const CALLS: u32 = 400;
    const RECEIVERS: usize = 4;
    const SIGNALS: u32 = 100;
    let bus = bus_with_workers(4);
    let start = Arc::new(Barrier::new(2 * PAIRS + RECEIVERS + 1));
    let mut answered = Vec::new();
    let mut callers = Vec::new();
    for pair in 0..PAIRS {
        let callee = bus.connect();
        let name = callee.unique_name().to_owned();
        let go = start.clone();
        answered.push(thread::spawn(move || {
            go.wait();
            echo(callee, CALLS)
        }));
        let mut caller = bus.connect();
        let go = start.clone();
        callers.push(thread::spawn(move || {
            go.wait();
            // Windows of different sizes: turns that read and write
            // different numbers of messages per connection.
            call_in_windows(&mut caller, &name, CALLS, 1 + pair as u32 % 5);
        }));
    }
    let mut received = Vec::new();
    let rule = format!("type='signal',interface='{INTERFACE}',member='Fd'");
    for _ in 0..RECEIVERS {
        let mut receiver = bus.connect();
        assert!(receiver.can_pass_fds());
        receiver.add_match(&rule).expect("AddMatch");
        let go = start.clone();
        received.push(thread::spawn(move || {
            go.wait();
            receive_fds(receiver, SIGNALS)
        }));
    }
    let mut emitter = bus.connect();
    start.wait();
    for n in 0..SIGNALS {
        let (_ours, theirs) = UnixStream::pair().unwrap();
        let signal = MessageBuilder::signal("/fds", INTERFACE, "Fd")
            .unix_fds(1)
            .body(vec![
                Value::Uint32(n),
                Value::Uint64(inode(&theirs)),
                Value::UnixFd(0),
            ]);
        emitter
            .send(signal, &[theirs.as_fd()])
            .expect("send a signal");
    }
    for caller in callers {
        caller.join().expect("a caller");
    }
    for callee in answered {
        assert_eq!(callee.join().expect("a callee"), CALLS);
    }
    for receiver in received {
        assert_eq!(receiver.join().expect("a receiver"), SIGNALS);
    }
}

/// Answers `calls` calls each carrying a number, a socket and its inode:
/// the reply carries the number and the inode back once the socket proved
/// to be the one sent.
fn echo_fds(callee: Connection, calls: u32) {
    answer_calls(callee, "EchoFd", calls, |_, body, fds| {
        assert_carries_the_sent_socket(&body, &fds, 1);
        body[..2].to_vec()
    });
}

/// Every caller's call waits in the stopped daemon's sockets, so that it
/// finds them all in one turn when it goes on: more connections to read
/// than the pool's threshold, and as many callees to write.
#[test]
fn a_turn_that_finds_many_connections_at_once_reads_and_writes_them_through_the_workers() {
    if skip::quickbus_only("the threads limit") {
        return;
    }
    const PAIRS: usize = 16;
    const ROUNDS: u32 = 5;
    let bus = bus_with_workers(4);
    let mut callers = Vec::new();
    let mut callees = Vec::new();
    for _ in 0..PAIRS {
        let callee = bus.connect();
        assert!(callee.can_pass_fds());
        let name = callee.unique_name().to_owned();
        callees.push(thread::spawn(move || echo_fds(callee, ROUNDS)));
        callers.push((bus.connect(), name));
    }
    for round in 0..ROUNDS {
        let mut sent = Vec::new();
        {
            let _stopped = Stopped::process(bus.pid());
            for (i, (caller, callee)) in callers.iter_mut().enumerate() {
                let (_ours, theirs) = UnixStream::pair().unwrap();
                let number = round * PAIRS as u32 + i as u32;
                let call = MessageBuilder::method_call("/echo", "EchoFd")
                    .interface(INTERFACE)
                    .destination(callee.clone())
                    .unix_fds(1)
                    .body(vec![
                        Value::Uint32(number),
                        Value::Uint64(inode(&theirs)),
                        Value::UnixFd(0),
                        // Each caller's calls of their own size: a write
                        // result given to the wrong callee shows.
                        Value::String("x".repeat(i * 13)),
                    ]);
                let serial = caller.send(call, &[theirs.as_fd()]).expect("send a call");
                sent.push((serial, number, inode(&theirs)));
            }
        }
        for ((caller, _), (serial, number, inode)) in callers.iter_mut().zip(sent) {
            let (reply, _) = caller.wait_reply(serial).expect("a reply");
            assert_eq!(
                reply.body_values().unwrap(),
                vec![Value::Uint32(number), Value::Uint64(inode)]
            );
        }
    }
    for callee in callees {
        callee.join().expect("a callee");
    }
}

/// A sender read ahead and then held back is read again when released,
/// not taken at its word of that earlier read: what it sent while held
/// arrives (a read-ahead's result stands for its own turn only).
#[test]
fn a_sender_held_after_its_read_ahead_is_read_again_when_released() {
    if skip::quickbus_only("the threads limit") {
        return;
    }
    use held_senders::{HeldSenders, LONG_BURST, SHORT_BURST};
    // Bursts a read takes whole (the read says the socket is empty), and
    // bursts longer than a read (it says more may wait).
    for burst in [SHORT_BURST, LONG_BURST] {
        let mut held = HeldSenders::start();
        held.burst_into_the_stopped_daemon(0, burst, |_| ());
        // Written while some are held: the daemon reads theirs once
        // released.
        held.burst(burst, burst);
        held.receive_all(2 * burst);
    }
}

/// The pool's threshold hook (`QUICKBUS_TEST_LEAST_PARALLEL`, which the
/// harness sets for `QUICKBUS_E2E_THREADS`) is named in the daemon's log
/// at start-up, as every test hook is, and a bus with it serves as any.
#[test]
fn the_pools_threshold_hook_is_named_in_the_log() {
    if skip::quickbus_only("quickbus's test hooks") {
        return;
    }
    let dir = TempDir::new();
    let config = write_config_with(dir.path(), Listen::UnixPath, &threads(2));
    let mut daemon = Command::new(daemon_path());
    daemon.env(forced_threads::LEAST_PARALLEL_HOOK, "1");
    let bus = Bus::start_command(
        dir,
        daemon,
        &[format!("--config-file={}", config.display())],
    );
    wait_for_workers(&bus, 2);
    let mut caller = bus.connect();
    let callee = bus.connect();
    let name = callee.unique_name().to_owned();
    let echoes = thread::spawn(move || echo(callee, 20));
    call_in_windows(&mut caller, &name, 20, 4);
    echoes.join().expect("the callee");
    bus.assert_names_test_hook("QUICKBUS_TEST_LEAST_PARALLEL=1");
}

/// The threads hook (`QUICKBUS_TEST_THREADS`, which scripts/test.sh sets
/// for the suites that bring configuration files of their own) replaces
/// the configuration's `threads` limit, at start-up and at a reload, and
/// is named in the log.
#[test]
fn the_threads_hook_replaces_the_configurations_limit() {
    if skip::quickbus_only("quickbus's test hooks") {
        return;
    }
    let dir = TempDir::new();
    // No limit of the test's own (the forced pass's harness adds its 4,
    // which the hook replaces all the same).
    let config = write_config_with(dir.path(), Listen::UnixPath, "");
    let mut daemon = Command::new(daemon_path());
    daemon.env(THREADS_HOOK, "3");
    let bus = Bus::start_command(
        dir,
        daemon,
        &[format!("--config-file={}", config.display())],
    );
    wait_for_workers(&bus, 3);
    // A reload that changes the limit leaves the pool the hook sized as
    // it is: the same threads, not a pool of the same size started anew.
    let before = worker_ids(bus.pid());
    reload_with(&bus, &threads(2));
    assert_eq!(worker_ids(bus.pid()), before);
    bus.connect().get_id().expect("GetId after the reload");
    bus.assert_names_test_hook("QUICKBUS_TEST_THREADS=3");
}

/// `QUICKBUS_E2E_THREADS=N` (the test command's second pass) starts the
/// harness's buses with N threads and the pool's test threshold; without
/// it the harness adds no `threads` limit of its own.
#[test]
fn the_harness_gives_its_buses_the_threads_it_is_told() {
    if skip::quickbus_only("the threads limit") {
        return;
    }
    let bus = Bus::start();
    let config = std::fs::read_to_string(bus.dir().join("bus.conf")).expect("the config");
    let Some(forced) = forced_threads::forced_threads() else {
        assert!(!config.contains(r#"name="threads""#), "{config}");
        return;
    };
    assert!(config.contains(&threads(forced)), "{config}");
    match forced {
        0 => {} // the daemon's default: as many as the cores say
        1 => wait_for_workers(&bus, 0),
        n => wait_for_workers(&bus, n as usize),
    }
    let hook = forced_threads::least_parallel();
    let log = bus.log();
    assert!(
        log.contains(&format!(
            "{}={hook} is set",
            forced_threads::LEAST_PARALLEL_HOOK
        )),
        "{log}"
    );
}
