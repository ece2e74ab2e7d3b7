//! A SIGUSR2 that arrives while a restart is under way is not lost: it
//! waits in the kernel across the exec, and the new image restarts again.

use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Stdio};

use quickbus_e2e::{
    quickbus_daemon_path, skip, terminate_and_wait, write_config, write_executable, Listen,
    TempDir, POLL_INTERVAL, TIMEOUT,
};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{kill_process, Pid, Signal};

use super::bus_from_a_copied_binary;
use super::support::{signal_restart, wait_for_log, RESTARTED};

/// Waits (bounded) until `path` exists.
fn wait_for_file(path: &Path) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} did not appear within {TIMEOUT:?}",
            path.display()
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[test]
fn a_sigusr2_during_a_restart_makes_another_restart_after_it() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let (bus, bin, daemon) = bus_from_a_copied_binary();
    // The binary at the daemon's path holds the restart at its version
    // check until the test opens the gate; then it is the daemon.
    let real = bin.join("quickbus-daemon.real");
    std::fs::rename(&daemon, &real).unwrap();
    let checking = bin.join("checking");
    let gate = bin.join("gate");
    write_executable(
        &daemon,
        &format!(
            "#!/bin/sh\n\
             if [ \"$1\" = --handover-version ]; then\n\
             \ttouch {checking}\n\
             \twhile [ ! -e {gate} ]; do sleep 0.01; done\n\
             fi\n\
             exec {real} \"$@\"\n",
            checking = checking.display(),
            gate = gate.display(),
            real = real.display(),
        ),
    );
    signal_restart(&bus);
    wait_for_file(&checking);
    // The restart is under way: the second signal comes now.
    signal_restart(&bus);
    std::fs::write(&gate, b"open").unwrap();
    wait_for_log(&bus, RESTARTED, 2);
    assert_eq!(bus.log().matches("SIGUSR2: restarting in place").count(), 2);
}

/// A SIGUSR2 sent as soon as the bus has told anyone it exists (its
/// address printed) restarts it; it never meets the default action, which
/// would end the bus. The daemon is held in the write of its address (its
/// stdout a full pipe) while the signal arrives: before the fix that
/// killed it.
#[test]
fn a_sigusr2_sent_while_the_bus_prints_its_address_restarts_it() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let (read_end, write_end) = pipe_with(PipeFlags::CLOEXEC).expect("pipe");
    fill(&write_end);
    let log = dir.path().join("daemon.stderr");
    let mut daemon = Command::new(quickbus_daemon_path())
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--print-address"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start the daemon");
    let pid = daemon.id();
    wait_until_writing_to_stdout(pid);
    kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::Usr2).unwrap();
    // Let the address through: it follows the filling on the pipe's
    // first line.
    let mut printed = String::new();
    let mut reader = BufReader::new(std::fs::File::from(read_end));
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        if let Some(at) = line.find("unix:") {
            printed = line[at..].trim().to_owned();
            break;
        }
        line.clear();
    }
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !printed.is_empty(),
        "no address printed; status {:?}, log:\n{}",
        daemon.try_wait(),
        logged()
    );
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !logged().contains(RESTARTED) {
        assert!(
            std::time::Instant::now() < deadline && daemon.try_wait().unwrap().is_none(),
            "the bus did not restart; status {:?}, log:\n{}",
            daemon.try_wait(),
            logged()
        );
        std::thread::sleep(POLL_INTERVAL);
    }
    assert!(logged().contains("SIGUSR2: restarting in place"));
    let mut conn = quickbus_client::Connection::connect(&printed).expect("connect after");
    conn.call(quickbus_client::bus_call("GetId"))
        .expect("GetId");
    terminate_and_wait(pid);
    let _ = daemon.wait();
}

/// Fills the pipe behind `write_end`, which stays blocking: the next write
/// to it waits until the other end reads.
fn fill(write_end: &OwnedFd) {
    let flags = fcntl_getfl(write_end).unwrap();
    fcntl_setfl(write_end, flags | OFlags::NONBLOCK).unwrap();
    let chunk = [b'.'; 4096];
    while rustix::io::write(write_end, &chunk).is_ok() {}
    fcntl_setfl(write_end, flags).unwrap();
}

/// Waits (bounded) until `pid` is in a `write` system call (number 1 on
/// x86-64; the only write it blocks in at start-up is its address's).
fn wait_until_writing_to_stdout(pid: u32) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        let fd_one = syscall.split(' ').nth(1) == Some("0x1");
        if syscall.starts_with(&format!("{} ", libc_write())) && fd_one {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon never blocked writing its address (syscall {syscall:?})"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The number of `write` on this architecture.
fn libc_write() -> u32 {
    if cfg!(target_arch = "x86_64") {
        1
    } else if cfg!(target_arch = "aarch64") {
        64
    } else {
        panic!("this test knows the number of write on x86-64 and aarch64 only")
    }
}
