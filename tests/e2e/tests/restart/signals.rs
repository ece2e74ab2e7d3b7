//! A SIGUSR2 that arrives while a restart is under way is not lost: it
//! waits in the kernel across the exec, and the new image restarts again.

use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Stdio};

use quickbus_e2e::{
    copy_executable, quickbus_daemon_path, skip, terminate_and_wait, write_config,
    write_executable, Listen, TempDir, POLL_INTERVAL, TIMEOUT,
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

/// A daemon held in the write of its address: its stdout is a full pipe,
/// so it has shown itself (the address is on its way) and waits until
/// [`HeldDaemon::release`] reads the pipe.
struct HeldDaemon {
    child: std::process::Child,
    pipe: BufReader<std::fs::File>,
    log: std::path::PathBuf,
    _dir: TempDir,
}

impl HeldDaemon {
    fn start(program: &Path, dir: TempDir) -> HeldDaemon {
        let config = write_config(dir.path(), Listen::UnixPath);
        let (read_end, write_end) = pipe_with(PipeFlags::CLOEXEC).expect("pipe");
        fill(&write_end);
        let log = dir.path().join("daemon.stderr");
        let child = Command::new(program)
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(write_end))
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the daemon");
        wait_until_writing_to_stdout(child.id());
        HeldDaemon {
            child,
            pipe: BufReader::new(std::fs::File::from(read_end)),
            log,
            _dir: dir,
        }
    }

    fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Reads the pipe: returns the address, which follows the filling on
    /// the pipe's first line.
    fn release(&mut self) -> String {
        let mut line = String::new();
        while self.pipe.read_line(&mut line).unwrap_or(0) > 0 {
            if let Some(at) = line.find("unix:") {
                return line[at..].trim().to_owned();
            }
            line.clear();
        }
        panic!(
            "no address printed; status {:?}, log:\n{}",
            self.child.try_wait(),
            self.logged()
        );
    }

    /// Waits (bounded) until the daemon logged that it restarted, failing
    /// at once if it exited.
    fn wait_restarted(&mut self) {
        let deadline = std::time::Instant::now() + TIMEOUT;
        while !self.logged().contains(RESTARTED) {
            let status = self.child.try_wait().unwrap();
            assert!(
                std::time::Instant::now() < deadline && status.is_none(),
                "the bus did not restart; status {status:?}, log:\n{}",
                self.logged()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn signal_restart(&self) {
        kill_process(Pid::from_raw(self.child.id() as i32).unwrap(), Signal::Usr2).unwrap();
    }
}

impl Drop for HeldDaemon {
    fn drop(&mut self) {
        terminate_and_wait(self.child.id());
        let _ = self.child.wait();
    }
}

/// A SIGUSR2 sent as soon as the bus has told anyone it exists (its
/// address printed) restarts it; it never meets the default action, which
/// would end the bus (it did before the handled signals were blocked from
/// that moment).
#[test]
fn a_sigusr2_sent_while_the_bus_prints_its_address_restarts_it() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let mut daemon = HeldDaemon::start(&quickbus_daemon_path(), TempDir::new());
    daemon.signal_restart();
    let address = daemon.release();
    daemon.wait_restarted();
    assert!(daemon.logged().contains("SIGUSR2: restarting in place"));
    let mut conn = quickbus_client::Connection::connect(&address).expect("connect after");
    conn.call(quickbus_client::bus_call("GetId"))
        .expect("GetId");
}

/// A restart runs the file at the path the daemon was started from, even
/// when that file is renamed the moment the bus shows itself (the daemon
/// opened its binary after printing its address, and then read the new
/// name of the file it runs).
#[test]
fn a_restart_runs_the_started_path_even_if_renamed_as_the_address_appears() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let dir = TempDir::new();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let daemon_path = bin.join("quickbus-daemon");
    copy_executable(&quickbus_daemon_path(), &daemon_path);
    let mut daemon = HeldDaemon::start(&daemon_path, dir);
    // An upgrade in this moment: the old file moves, a new one takes its
    // path (a script that leaves a mark, then runs the daemon).
    let real = bin.join("quickbus-daemon.real");
    std::fs::rename(&daemon_path, &real).unwrap();
    let ran = bin.join("ran");
    write_executable(
        &daemon_path,
        &format!(
            "#!/bin/sh\ntouch {ran}\nexec {real} \"$@\"\n",
            ran = ran.display(),
            real = real.display()
        ),
    );
    daemon.release();
    daemon.signal_restart();
    daemon.wait_restarted();
    assert!(
        ran.exists(),
        "the restart did not run the file at the daemon's path; log:\n{}",
        daemon.logged()
    );
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
