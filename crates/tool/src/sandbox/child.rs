//! COMMAND, run with the container's address as its bus: started, given
//! the signals the launcher receives, waited for, and its exit status
//! turned into the launcher's own.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};
use std::thread;

use rustix::process::{getpgrp, pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
use rustix::termios::tcgetpgrp;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The signals passed on to COMMAND (see [`needs_forwarding`]). Ending
/// COMMAND this way lets the launcher stop the instance afterwards; ending
/// the launcher alone would leave COMMAND running on a socket whose
/// creator is gone.
pub const FORWARDED: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// Bus variables COMMAND must not inherit: the activation variables point
/// at the real bus, which would be a way around the container.
const STARTER_VARIABLES: [&str; 2] = ["DBUS_STARTER_ADDRESS", "DBUS_STARTER_BUS_TYPE"];

/// Which of the bus variables carries the container's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusKind {
    Session,
    System,
}

impl BusKind {
    pub fn variable(self) -> &'static str {
        match self {
            BusKind::Session => "DBUS_SESSION_BUS_ADDRESS",
            BusKind::System => "DBUS_SYSTEM_BUS_ADDRESS",
        }
    }
}

/// `argv` as a command whose bus (`kind`) is `address`.
pub fn command(argv: &[OsString], kind: BusKind, address: &str) -> Command {
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]).env(kind.variable(), address);
    for variable in STARTER_VARIABLES {
        command.env_remove(variable);
    }
    command
}

/// A running COMMAND with the launcher's signals passed on to it.
pub struct Running {
    child: Child,
}

impl Running {
    /// Starts `command`. The forwarded signals are caught from here on, so
    /// none of them ends the launcher before it has stopped the instance.
    pub fn start(mut command: Command) -> io::Result<Running> {
        let mut signals = Signals::new(FORWARDED)?;
        let mut child = command.spawn()?;
        // A pidfd, not the pid: the signal can never reach another
        // process that reused the pid after COMMAND was reaped. Without
        // one (a kernel before 5.3) COMMAND cannot be looked after: it is
        // killed and reaped rather than left running outside the
        // instance's life.
        let pidfd = match pidfd_open(Pid::from_child(&child), PidfdFlags::empty()) {
            Ok(pidfd) => pidfd,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot watch it (pidfd_open: {e}); it was stopped"),
                ));
            }
        };
        thread::spawn(move || forward(&mut signals, &pidfd));
        Ok(Running { child })
    }

    /// Waits for COMMAND to exit.
    pub fn wait(mut self) -> io::Result<ExitStatus> {
        self.child.wait()
    }
}

fn forward(signals: &mut Signals, pidfd: &OwnedFd) {
    for signal in signals.forever() {
        if !needs_forwarding(signal, in_terminal_foreground()) {
            continue;
        }
        if let Some(signal) = Signal::from_raw(signal) {
            // Fails only once COMMAND has exited: nothing left to tell.
            let _ = pidfd_send_signal(pidfd, signal);
        }
    }
}

/// Whether COMMAND must be sent `signal`, which the launcher received.
/// COMMAND shares the launcher's process group, so when that group is its
/// terminal's foreground group, a SIGINT or SIGHUP most likely came from
/// the terminal (Ctrl-C, hang-up) and reached COMMAND already: a second
/// copy would interrupt its handling of the first.
fn needs_forwarding(signal: i32, in_terminal_foreground: bool) -> bool {
    signal == SIGTERM || !in_terminal_foreground
}

/// Whether this process group is the foreground group of the controlling
/// terminal (false without one).
fn in_terminal_foreground() -> bool {
    std::fs::File::open("/dev/tty")
        .and_then(|tty| Ok(tcgetpgrp(&tty)?))
        .is_ok_and(|foreground| foreground == getpgrp())
}

/// The launcher's exit status for COMMAND's: its exit code, or 128 plus
/// the signal that killed it, as a shell reports it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => 1,
    }
}

/// A shell's exit status for a command it could not run: 127 when it does
/// not exist, 126 when it exists but cannot be executed.
pub fn exit_code_of_spawn_error(error: &io::Error) -> u8 {
    if error.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_a_shells() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(255 << 8)), 255);
        // Killed by SIGTERM (15), no core dump.
        assert_eq!(exit_code(ExitStatus::from_raw(SIGTERM)), 128 + 15);
        // Killed by SIGKILL (9) is 137.
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }

    #[test]
    fn sigterm_is_always_passed_on_and_terminal_signals_only_from_elsewhere() {
        assert!(needs_forwarding(SIGTERM, true));
        assert!(needs_forwarding(SIGTERM, false));
        for terminal_signal in [SIGINT, SIGHUP] {
            assert!(!needs_forwarding(terminal_signal, true));
            assert!(needs_forwarding(terminal_signal, false));
        }
    }

    #[test]
    fn a_missing_command_is_127_and_an_unrunnable_one_126() {
        let missing = Command::new("/nonexistent/quickbus-sandbox-test")
            .spawn()
            .unwrap_err();
        assert_eq!(exit_code_of_spawn_error(&missing), 127);
        let directory = Command::new("/").spawn().unwrap_err();
        assert_eq!(exit_code_of_spawn_error(&directory), 126);
    }

    #[test]
    fn the_command_gets_the_address_in_its_bus_variable_and_no_starter() {
        let argv: Vec<OsString> = ["sh", "-c", "x"].map(OsString::from).to_vec();
        let command = command(&argv, BusKind::System, "unix:path=/c");
        let envs: Vec<_> = command.get_envs().collect();
        assert!(envs.contains(&(
            "DBUS_SYSTEM_BUS_ADDRESS".as_ref(),
            Some("unix:path=/c".as_ref())
        )));
        for variable in STARTER_VARIABLES {
            assert!(envs.contains(&(variable.as_ref(), None)), "{envs:?}");
        }
        assert_eq!(command.get_program(), "sh");
        assert_eq!(command.get_args().count(), 2);
    }
}
