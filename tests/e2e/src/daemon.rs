//! The bus daemon under test, started with a throw-away configuration and
//! stopped with SIGTERM, which must end it cleanly (exit status 0).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;

use quickbus_client::Connection;
use rustix::io::{fcntl_setfd, FdFlags};
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{kill_process, Pid, Signal};

use crate::forced_threads;
use crate::locate::{daemon_path, python_path, TempDir};
use crate::process::{describe, run_bounded, spawn_lock, wait_bounded, Background, Finished};
use crate::{Peer, TIMEOUT};

/// How the test bus listens.
#[derive(Clone, Copy, Debug)]
pub enum Listen {
    /// `unix:path=<tmpdir>/bus`
    UnixPath,
    /// `unix:tmpdir=<tmpdir>` (the daemon picks the socket name)
    UnixTmpdir,
}

/// Writes `<dir>/bus.conf`: a session bus listening as `listen` says, with
/// EXTERNAL authentication and a policy that allows everything.
pub fn write_config(dir: &Path, listen: Listen) -> PathBuf {
    write_config_with(dir, listen, "")
}

/// [`write_config`] with `extra` placed inside `<busconfig>` (for example
/// `<limit>` elements). With `QUICKBUS_E2E_THREADS=N` (see
/// [`crate::forced_threads`]), a `threads` limit of `N` unless `extra` sets
/// one.
pub fn write_config_with(dir: &Path, listen: Listen, extra: &str) -> PathBuf {
    let threads = forced_threads::threads_limit(extra).unwrap_or_default();
    write_config_file(dir, listen, &format!("{extra}\n  {threads}"))
}

/// [`write_config`] for a daemon other than the one under test (the
/// reference `dbus-daemon` run next to quickbus): never a forced `threads`
/// limit, which dbus-daemon refuses ("There is no limit called").
pub fn write_reference_config(dir: &Path, listen: Listen) -> PathBuf {
    write_config_file(dir, listen, "")
}

fn write_config_file(dir: &Path, listen: Listen, extra: &str) -> PathBuf {
    let listen = match listen {
        Listen::UnixPath => format!("unix:path={}", dir.join("bus").display()),
        Listen::UnixTmpdir => format!("unix:tmpdir={}", dir.display()),
    };
    let config = format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>{listen}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
  {extra}
</busconfig>
"#
    );
    let path = dir.join("bus.conf");
    std::fs::write(&path, config).unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
    path
}

/// A running bus daemon. Dropping it sends SIGTERM and checks that the
/// daemon exits with status 0.
pub struct Bus {
    child: Child,
    address: String,
    dir: TempDir,
    stopped: bool,
}

impl Bus {
    /// A bus listening on `unix:path=` in a fresh directory.
    pub fn start() -> Bus {
        Bus::start_with(Listen::UnixPath)
    }

    /// Starts the daemon with `--config-file=<fresh config> --nofork
    /// --print-address=<pipe fd>` and reads its address from the pipe.
    pub fn start_with(listen: Listen) -> Bus {
        Bus::start_with_config(listen, "")
    }

    /// [`Bus::start_with`] with `extra` elements in the configuration
    /// (see [`write_config_with`]).
    pub fn start_with_config(listen: Listen, extra: &str) -> Bus {
        let dir = TempDir::new();
        let config = write_config_with(dir.path(), listen, extra);
        Bus::start_args(dir, &[format!("--config-file={}", config.display())])
    }

    /// A bus whose configuration `write` puts in the bus's fresh directory
    /// (it returns the file's path).
    pub fn start_configured(write: impl FnOnce(&Path) -> PathBuf) -> Bus {
        let dir = TempDir::new();
        let config = write(dir.path());
        Bus::start_args(dir, &[format!("--config-file={}", config.display())])
    }

    /// Starts the daemon with `args` (which choose the configuration, e.g.
    /// `--system --address=...`) plus `--nofork --print-address=<pipe fd>`,
    /// `dir` as its scratch directory, and reads its address from the pipe.
    pub fn start_args(dir: TempDir, args: &[String]) -> Bus {
        Bus::start_command(dir, Command::new(daemon_path()), args)
    }

    /// [`Bus::start_args`] with `cmd` as the program, for a daemon run
    /// through a wrapper (which ends by running the daemon with the
    /// arguments it is given) or with a special environment.
    pub fn start_command(dir: TempDir, mut cmd: Command, args: &[String]) -> Bus {
        forced_threads::lower_threshold(&mut cmd);
        let (read_end, write_end) = pipe_with(PipeFlags::CLOEXEC).expect("pipe");
        cmd.args(args)
            .arg("--nofork")
            .arg(format!("--print-address={}", write_end.as_raw_fd()))
            .stdin(Stdio::null())
            .stdout(File::create(dir.path().join("daemon.stdout")).expect("stdout log"))
            .stderr(File::create(dir.path().join("daemon.stderr")).expect("stderr log"));
        let name = describe(&cmd);
        let child = {
            let _guard = spawn_lock();
            fcntl_setfd(&write_end, FdFlags::empty()).expect("make the pipe inheritable");
            let child = cmd
                .spawn()
                .unwrap_or_else(|err| panic!("cannot start {name}: {err}"));
            drop(write_end); // only the daemon holds it now: EOF if it dies
            child
        };
        let mut bus = Bus {
            child,
            address: String::new(),
            dir,
            stopped: false,
        };
        bus.address = bus.read_address(File::from(read_end), &name);
        bus
    }

    fn read_address(&self, pipe: File, name: &str) -> String {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(pipe).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(TIMEOUT).unwrap_or_default();
        let address = line.trim_end_matches('\n').to_owned();
        assert!(
            line.ends_with('\n') && !address.is_empty(),
            "{name} printed no address line (got {line:?}); stderr: {}",
            self.log()
        );
        assert_guid_suffix(&address);
        address
    }

    /// The address the daemon printed, `...,guid=<32 hex digits>`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The GUID at the end of the bus address (the server GUID; dbus-daemon's
    /// `GetId` returns a different, bus-wide id).
    pub fn guid(&self) -> &str {
        &self.address[self.address.len() - 32..]
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// This bus's scratch directory (removed when the bus drops).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Panics, with the daemon's stderr, if it has exited.
    pub fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the daemon died ({status}); stderr: {}", self.log());
        }
    }

    /// What the daemon wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.stderr")).unwrap_or_default()
    }

    /// Panics unless the daemon's log names its test hook `setting`
    /// (`NAME=VALUE`), as quickbus-daemon does at start-up for each hook
    /// set (`warn_of_test_hooks`): the one place its wording is spelt.
    pub fn assert_names_test_hook(&self, setting: &str) {
        let log = self.log();
        assert!(
            log.contains(&format!("{setting} is set: a hook for quickbus's tests")),
            "the log does not name the test hook {setting}:\n{log}"
        );
    }

    /// A new [`quickbus_client::Connection`] to this bus (Hello done), with
    /// [`TIMEOUT`] as its read time-out.
    pub fn connect(&self) -> Connection {
        self.try_connect()
            .unwrap_or_else(|err| panic!("connecting to {}: {err}", self.address))
    }

    /// [`Bus::connect`], its failure returned.
    pub fn try_connect(&self) -> Result<Connection, quickbus_client::Error> {
        Connection::connect_with_timeout(&self.address, TIMEOUT)
    }

    /// A command for `program` that talks to this bus as its session bus.
    pub fn client(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("DBUS_SESSION_BUS_ADDRESS", &self.address)
            .env_remove("DBUS_STARTER_ADDRESS")
            .env_remove("DBUS_STARTER_BUS_TYPE")
            .env("XDG_RUNTIME_DIR", self.dir.path())
            .env("SYSTEMD_PAGER", "")
            .env("PAGER", "cat");
        cmd
    }

    /// [`Bus::client`] running as `uid`:`gid` with no supplementary
    /// groups (the test runs as root to use this).
    pub fn client_as(&self, program: impl AsRef<std::ffi::OsStr>, uid: u32, gid: u32) -> Command {
        let mut cmd = self.client(program);
        // std drops the supplementary groups when root changes uid.
        cmd.uid(uid).gid(gid);
        cmd
    }

    /// Runs a client to completion (bounded) against this bus.
    pub fn run(&self, program: &str, args: &[&str]) -> Finished {
        run_bounded(self.client(program).args(args))
    }

    /// Asks the bus to reload its configuration (ReloadConfig with
    /// dbus-send, as an administrator would), which must succeed.
    pub fn reload_config(&self) {
        self.run(
            "dbus-send",
            &[
                "--session",
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.ReloadConfig",
            ],
        )
        .success();
    }

    /// Starts a client in the background against this bus.
    pub fn spawn(&self, program: &str, args: &[&str]) -> Background {
        Background::spawn(self.client(program).args(args))
    }

    /// Starts a scriptable dbus-python peer on this bus (see python/peer.py).
    pub fn peer(&self) -> Peer {
        Peer::start(self.client(python_path()))
    }

    /// A dbus-python peer that connects to `address` (a container's
    /// socket, say) instead of the bus's own.
    pub fn peer_at(&self, address: &str) -> Peer {
        let mut cmd = self.client(python_path());
        cmd.env("DBUS_SESSION_BUS_ADDRESS", address);
        Peer::start(cmd)
    }

    /// A dbus-python peer running as `uid`:`gid` (see [`Bus::client_as`]).
    pub fn peer_as(&self, uid: u32, gid: u32) -> Peer {
        Peer::start(self.client_as(python_path(), uid, gid))
    }

    /// Sends SIGTERM and waits (bounded) for the daemon to exit.
    pub fn stop(mut self) -> ExitStatus {
        self.terminate()
    }

    fn terminate(&mut self) -> ExitStatus {
        self.stopped = true;
        // A daemon may print its address before installing its SIGTERM
        // handler (dbus-daemon does); one round trip (Hello) proves its main
        // loop runs. The outcome is not the point, only the wait: dbus-send
        // tries where our client cannot connect.
        if self.try_connect().is_err() {
            let _ = run_bounded(self.client("dbus-send").args([
                "--session",
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.Peer.Ping",
            ]));
        }
        let pid = Pid::from_child(&self.child);
        let _ = kill_process(pid, Signal::Term);
        match wait_bounded(&mut self.child) {
            Some(status) => status,
            None => panic!(
                "daemon ignored SIGTERM for {TIMEOUT:?}; killed it. stderr: {}",
                self.log()
            ),
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        if thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            eprintln!("daemon stderr:\n{}", self.log());
            return;
        }
        let status = self.terminate();
        assert!(
            status.success(),
            "daemon exited with {status} on SIGTERM (expected 0); stderr: {}",
            self.log()
        );
    }
}

/// `dbus-send` calling a method of the bus driver on the bus at `address`
/// (for daemons a test started itself, not through [`Bus`]).
pub fn driver_call(address: &str, member: &str) -> Finished {
    run_bounded(
        Command::new("dbus-send")
            .env("DBUS_SESSION_BUS_ADDRESS", address)
            .args([
                "--session",
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
            ])
            .arg(format!("org.freedesktop.DBus.{member}")),
    )
}

/// Asserts that a bus address ends in `,guid=` and 32 hex digits.
pub fn assert_guid_suffix(address: &str) {
    let guid = address.rsplit_once(",guid=").map(|(_, guid)| guid);
    assert!(
        guid.is_some_and(|g| g.len() == 32 && g.bytes().all(|b| b.is_ascii_hexdigit())),
        "address {address:?} does not end in ,guid=<32 hex digits>"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_suffix_must_be_32_hex_digits_at_the_end() {
        assert_guid_suffix("unix:path=/tmp/x,guid=0123456789abcdef0123456789abcdef");
        for bad in [
            "unix:path=/tmp/x",
            "unix:path=/tmp/x,guid=0123456789abcdef0123456789abcde",
            "unix:path=/tmp/x,guid=0123456789abcdef0123456789abcdeg",
            "unix:path=/tmp/x,guid=0123456789abcdef0123456789abcdef,x=y",
        ] {
            let outcome = std::panic::catch_unwind(|| assert_guid_suffix(bad));
            assert!(outcome.is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn config_listens_where_asked_and_allows_everything() {
        let dir = TempDir::new();
        let text = std::fs::read_to_string(write_config(dir.path(), Listen::UnixPath)).unwrap();
        let listen = format!("<listen>unix:path={}/bus</listen>", dir.path().display());
        assert!(text.contains(&listen), "{text}");
        assert!(text.contains("<auth>EXTERNAL</auth>"), "{text}");
        assert!(text.contains("<type>session</type>"), "{text}");
        let text = std::fs::read_to_string(write_config(dir.path(), Listen::UnixTmpdir)).unwrap();
        let listen = format!("<listen>unix:tmpdir={}</listen>", dir.path().display());
        assert!(text.contains(&listen), "{text}");
    }
}
