//! dbus-daemon compatible command line.
//!
//! The options, their spelling and their checks follow `man dbus-daemon`
//! and the behaviour of dbus-daemon 1.14:
//! - exactly one of `--session`, `--system`, `--config-file` (a second one,
//!   even the same one again, is refused naming the first);
//! - `--address`, `--print-address`, `--print-pid` at most once each;
//! - `--fork`/`--nofork` and `--syslog`/`--syslog-only`/`--nosyslog`:
//!   the last one given wins, as in dbus-daemon;
//! - `--print-address` and `--print-pid` take an optional descriptor, as
//!   `=FD` or as the next argument; none (or an empty one) means stdout;
//! - usage errors exit with status 1, not clap's 2.

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

/// Where the configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--session`: the standard session bus configuration.
    Session,
    /// `--system`: the standard system bus configuration.
    System,
    /// `--config-file=FILE`.
    File(PathBuf),
}

/// Where `--print-address` / `--print-pid` write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrintTarget {
    Stdout,
    /// A descriptor inherited from the parent.
    Fd(RawFd),
}

/// What `--syslog`, `--syslog-only` or `--nosyslog` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyslogMode {
    /// `--nosyslog`: standard error only.
    Off,
    /// `--syslog`: the system log and standard error.
    Also,
    /// `--syslog-only`: the system log only.
    Only,
}

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `Session` when only `--introspect` was given: introspection needs
    /// no configuration, and the caller exits after printing it.
    pub config: ConfigSource,
    pub address: Option<String>,
    pub print_address: Option<PrintTarget>,
    pub print_pid: Option<PrintTarget>,
    /// `--fork` was the last of `--fork`/`--nofork`.
    pub fork: bool,
    /// `--nofork` was the last of `--fork`/`--nofork`.
    pub nofork: bool,
    pub nopidfile: bool,
    pub systemd_activation: bool,
    pub introspect: bool,
    /// None: as the configuration says.
    pub syslog: Option<SyslogMode>,
}

/// Parsing stopped: print `message` and exit with `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub message: String,
    pub code: i32,
    /// stdout for `--help` and `--version`, stderr for errors.
    pub to_stdout: bool,
}

impl Exit {
    fn usage_error(message: impl Into<String>) -> Exit {
        Exit {
            message: format!("{}\n{USAGE}\n", message.into()),
            code: 1,
            to_stdout: false,
        }
    }

    fn plain_error(message: impl Into<String>) -> Exit {
        Exit {
            message: format!("{}\n", message.into()),
            code: 1,
            to_stdout: false,
        }
    }

    /// Print the message where it belongs; the exit code to return.
    pub fn print_and_code(self) -> i32 {
        use std::io::Write;
        let written = if self.to_stdout {
            std::io::stdout().write_all(self.message.as_bytes())
        } else {
            std::io::stderr().write_all(self.message.as_bytes())
        };
        // A closed stdout must not turn --version into success silently.
        if written.is_err() && self.code == 0 {
            return 1;
        }
        self.code
    }
}

/// dbus-daemon's usage line, with our binary's name.
pub const USAGE: &str = "quickbus-daemon [--version] [--session] [--system] [--config-file=FILE] \
[--print-address[=DESCRIPTOR]] [--print-pid[=DESCRIPTOR]] [--introspect] [--address=ADDRESS] \
[--nopidfile] [--nosyslog] [--syslog] [--syslog-only] [--nofork] [--fork] [--systemd-activation]";

/// The `--version` text.
pub fn version_text() -> String {
    format!(
        "quickbus-daemon {}\n\
         Compatible with the D-Bus specification and dbus-daemon's command line and configuration files.\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn flag(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .help(help)
        .action(ArgAction::Append)
        .num_args(0)
        .value_parser(clap::value_parser!(bool))
        .default_missing_value("true")
}

/// An option whose value may be left out (`--print-address[=FD]`).
fn optional_value(name: &'static str, value_name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name(value_name)
        .help(help)
        .action(ArgAction::Append)
        .num_args(0..=1)
        .default_missing_value("")
}

fn value(name: &'static str, value_name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name(value_name)
        .help(help)
        .action(ArgAction::Append)
        .num_args(1)
}

fn command() -> Command {
    Command::new("quickbus-daemon")
        .about("A D-Bus message bus daemon, drop-in for dbus-daemon.")
        .override_usage(USAGE)
        .disable_version_flag(true)
        // Every option is counted by hand (Append) so that repeats get
        // dbus-daemon's messages and "last one wins" can be decided.
        .args_override_self(false)
        .arg(flag(
            "session",
            "Use the standard configuration of the per-login-session bus",
        ))
        .arg(flag(
            "system",
            "Use the standard configuration of the system-wide bus",
        ))
        .arg(value(
            "config-file",
            "FILE",
            "Use the given configuration file",
        ))
        .arg(value(
            "address",
            "ADDRESS",
            "Listen on ADDRESS instead of the configured <listen>",
        ))
        .arg(optional_value(
            "print-address",
            "DESCRIPTOR",
            "Print the bus address to stdout or to the given descriptor",
        ))
        .arg(optional_value(
            "print-pid",
            "DESCRIPTOR",
            "Print the process id to stdout or to the given descriptor",
        ))
        .arg(flag(
            "fork",
            "Fork and become a daemon, whatever the configuration says",
        ))
        .arg(flag(
            "nofork",
            "Do not fork, whatever the configuration says",
        ))
        .arg(flag("nopidfile", "Do not write the configured pid file"))
        .arg(flag(
            "systemd-activation",
            "Enable systemd-style service activation",
        ))
        .arg(flag(
            "introspect",
            "Print the introspection data of the bus driver and exit",
        ))
        .arg(flag("syslog", "Log to the system log as well as to stderr"))
        .arg(flag("syslog-only", "Log to the system log only"))
        .arg(flag("nosyslog", "Log to stderr only"))
        .arg(flag("version", "Print the version and exit"))
        // For packaging: dbus-daemon has no such option, so it stays out
        // of --help (docs/architecture.md, "Under systemd").
        .arg(flag("generate-man", "Print this manual page (roff) and exit").hide(true))
        // Asked by a running daemon of the binary it is about to become
        // (docs/restart.md); not dbus-daemon's, so out of --help too.
        .arg(
            flag(
                "handover-version",
                "Print the version of the restart handover format and exit",
            )
            .hide(true),
        )
}

/// quickbus-daemon(1) in roff, from the options above (clap_mangen), with
/// the sections that say where the configuration comes from.
pub fn man_page() -> String {
    let command = command().version(env!("CARGO_PKG_VERSION")).long_about(
        "quickbus-daemon is a D-Bus message bus daemon, a drop-in replacement for \
         dbus-daemon(1): the same wire protocol, command line, XML configuration \
         files (/usr/share/dbus-1/system.conf, session.conf and their .d directories) \
         and org.freedesktop.DBus driver interface. Its own configuration \
         additions are described in quickbus-daemon.conf(5).",
    );
    let man = clap_mangen::Man::new(command);
    let mut page = Vec::new();
    let rendered = man
        .render_title(&mut page)
        .and_then(|()| man.render_name_section(&mut page))
        .and_then(|()| man.render_synopsis_section(&mut page))
        .and_then(|()| man.render_description_section(&mut page))
        .and_then(|()| man.render_options_section(&mut page));
    // Writing to a Vec cannot fail.
    debug_assert!(rendered.is_ok());
    page.extend_from_slice(MAN_EXTRA_SECTIONS.as_bytes());
    String::from_utf8_lossy(&page).into_owned()
}

/// The sections clap knows nothing of.
const MAN_EXTRA_SECTIONS: &str = r#".SH "SYSTEMD"
The system bus runs as
.B quickbus.service
(alias
.BR dbus.service )
and the user bus as the user unit of the same name, both started by
.BR dbus.socket .
The daemon tells systemd when it is ready, reloading and stopping
(sd_notify) and honours WATCHDOG_USEC.
.PP
Switch a machine to quickbus at its next boot:
.PP
.nf
    systemctl enable quickbus.service
    systemctl \-\-global enable quickbus.service
.fi
.PP
and back to dbus\-daemon:
.PP
.nf
    systemctl disable quickbus.service
    systemctl \-\-global disable quickbus.service
.fi
.SH "SIGNALS"
.TP
.B SIGHUP
Reload the configuration, as dbus\-daemon does.
.TP
.B SIGTERM\fR, \fBSIGINT
Shut down.
.TP
.B SIGUSR2
Restart in place: execute the binary the daemon was started from (after an
upgrade, the new one) in the same process, handing it every connection,
name, match rule and queued message; clients notice nothing.
.B quickbus restart
does the same and waits for the outcome. A binary that cannot take over is
refused and the bus serves on. See /usr/share/doc/quickbus/restart.md.
.SH "SEE ALSO"
.BR dbus\-daemon (1),
.BR quickbus (1),
.BR quickbus\-daemon.conf (5)
"#;

/// Parse the whole command line, program name first (as `args_os()`).
pub fn parse_args<I, T>(args: I) -> Result<Options, Exit>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = command().try_get_matches_from(args).map_err(|e| {
        use clap::error::ErrorKind;
        match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => Exit {
                message: e.render().to_string(),
                code: 0,
                to_stdout: true,
            },
            _ => Exit {
                message: e.render().to_string(),
                code: 1,
                to_stdout: false,
            },
        }
    })?;
    if given(&matches, "generate-man") {
        return Err(Exit {
            message: man_page(),
            code: 0,
            to_stdout: true,
        });
    }
    if given(&matches, "handover-version") {
        return Err(Exit {
            message: format!("{}\n", crate::restart::HANDOVER_VERSION),
            code: 0,
            to_stdout: true,
        });
    }
    if given(&matches, "version") {
        return Err(Exit {
            message: version_text(),
            code: 0,
            to_stdout: true,
        });
    }
    let introspect = given(&matches, "introspect");
    let config = match config_source(&matches)? {
        Some(source) => source,
        None if introspect => ConfigSource::Session,
        None => return Err(Exit::usage_error("No configuration file specified.")),
    };
    let fork_choice = last_of(&matches, &["fork", "nofork"]);
    // As dbus-daemon's flags: the last of the three decides between off
    // and on, and `--syslog-only` once given keeps standard error silent
    // whenever the system log is on (`--syslog` does not undo it).
    let syslog = last_of(&matches, &["nosyslog", "syslog", "syslog-only"]).map(|name| {
        if name == "nosyslog" {
            SyslogMode::Off
        } else if given(&matches, "syslog-only") {
            SyslogMode::Only
        } else {
            SyslogMode::Also
        }
    });
    Ok(Options {
        config,
        address: single_value(&matches, "address", "address")?,
        print_address: print_target(&matches, "print-address", "printing address to")?,
        print_pid: print_target(&matches, "print-pid", "printing pid to")?,
        fork: fork_choice == Some("fork"),
        nofork: fork_choice == Some("nofork"),
        nopidfile: given(&matches, "nopidfile"),
        systemd_activation: given(&matches, "systemd-activation"),
        introspect,
        syslog,
    })
}

fn given(matches: &ArgMatches, name: &str) -> bool {
    matches.value_source(name) == Some(ValueSource::CommandLine)
}

/// Position of every occurrence of an option on the command line.
fn positions(matches: &ArgMatches, name: &str) -> Vec<usize> {
    if !given(matches, name) {
        return Vec::new();
    }
    matches
        .indices_of(name)
        .map(|i| i.collect())
        .unwrap_or_default()
}

/// Of options that cancel each other, the one given last.
fn last_of<'a>(matches: &ArgMatches, names: &[&'a str]) -> Option<&'a str> {
    names
        .iter()
        .filter_map(|name| {
            positions(matches, name)
                .into_iter()
                .max()
                .map(|p| (p, *name))
        })
        .max()
        .map(|(_, name)| name)
}

/// `--session`, `--system`, `--config-file` in command-line order; a
/// second one is refused naming the file the first one chose.
fn config_source(matches: &ArgMatches) -> Result<Option<ConfigSource>, Exit> {
    let mut requests: Vec<(usize, &str, ConfigSource)> = Vec::new();
    for position in positions(matches, "session") {
        requests.push((position, "session", ConfigSource::Session));
    }
    for position in positions(matches, "system") {
        requests.push((position, "system", ConfigSource::System));
    }
    if given(matches, "config-file") {
        let files = matches
            .get_many::<String>("config-file")
            .into_iter()
            .flatten();
        for (position, file) in positions(matches, "config-file").into_iter().zip(files) {
            requests.push((position, "config-file", ConfigSource::File(file.into())));
        }
    }
    requests.sort_by_key(|(position, _, _)| *position);
    let mut requests = requests.into_iter();
    let first = requests.next().map(|(_, _, source)| source);
    if let (Some(first), Some((_, option, _))) = (&first, requests.next()) {
        return Err(Exit::plain_error(format!(
            "--{option} specified but configuration file {} already requested",
            describe_source(first)
        )));
    }
    Ok(first)
}

/// How dbus-daemon names a configuration source in its messages.
fn describe_source(source: &ConfigSource) -> String {
    match source {
        ConfigSource::Session => crate::config::SESSION_CONFIG_FILE.to_owned(),
        ConfigSource::System => crate::config::SYSTEM_CONFIG_FILE.to_owned(),
        ConfigSource::File(path) => path.display().to_string(),
    }
}

/// The value of an option allowed once; `what` names it in the error.
fn single_value(matches: &ArgMatches, name: &str, what: &str) -> Result<Option<String>, Exit> {
    if !given(matches, name) {
        return Ok(None);
    }
    let mut values = matches.get_many::<String>(name).into_iter().flatten();
    let first = values.next().cloned();
    if values.next().is_some() {
        return Err(Exit::plain_error(format!(
            "--{name} specified but {what} {} already requested",
            first.as_deref().unwrap_or("")
        )));
    }
    Ok(first)
}

fn print_target(matches: &ArgMatches, name: &str, what: &str) -> Result<Option<PrintTarget>, Exit> {
    let Some(value) = single_value(matches, name, what)? else {
        return Ok(None);
    };
    parse_descriptor(&value).map(Some)
}

/// Empty means stdout; otherwise a non-negative decimal descriptor.
fn parse_descriptor(value: &str) -> Result<PrintTarget, Exit> {
    if value.is_empty() {
        return Ok(PrintTarget::Stdout);
    }
    match value.parse::<RawFd>() {
        Ok(fd) if fd >= 0 => Ok(PrintTarget::Fd(fd)),
        _ => Err(Exit::plain_error(format!(
            "Invalid file descriptor: \"{value}\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manual_page_documents_every_option() {
        let page = man_page();
        assert!(page.starts_with(".ie"), "roff: {}", &page[..40]);
        assert!(page.contains(".TH quickbus-daemon 1"), "{page}");
        // Each option has its own entry under OPTIONS (the synopsis,
        // dbus-daemon's usage line, names them all anyway).
        let (_, options) = page.split_once(".SH OPTIONS").expect("an OPTIONS section");
        let mut documented = 0;
        for arg in command().get_arguments().filter(|a| !a.is_hide_set()) {
            let long = arg.get_long().unwrap();
            // roff: bold, dashes escaped: \fB\-\-print\-address\fR
            let roff = format!("\\fB\\-\\-{}\\fR", long.replace('-', "\\-"));
            assert!(
                options.contains(&roff),
                "--{long} ({roff}) missing from OPTIONS"
            );
            documented += 1;
        }
        assert!(documented >= 15);
        assert!(!page.contains("generate\\-man"));
        assert!(page.contains("quickbus\\-daemon.conf"));
    }

    #[test]
    fn generate_man_prints_the_page_without_a_configuration() {
        let exit = parse(&["--generate-man"]).unwrap_err();
        assert_eq!(exit.code, 0);
        assert!(exit.to_stdout);
        assert_eq!(exit.message, man_page());
    }

    fn parse(args: &[&str]) -> Result<Options, Exit> {
        parse_args(std::iter::once("quickbus-daemon").chain(args.iter().copied()))
    }

    fn error(args: &[&str]) -> Exit {
        let exit = parse(args).expect_err("should be refused");
        assert_eq!(exit.code, 1, "{}", exit.message);
        assert!(!exit.to_stdout);
        exit
    }

    #[test]
    fn session_alone_gives_the_defaults() {
        assert_eq!(
            parse(&["--session"]).unwrap(),
            Options {
                config: ConfigSource::Session,
                address: None,
                print_address: None,
                print_pid: None,
                fork: false,
                nofork: false,
                nopidfile: false,
                systemd_activation: false,
                introspect: false,
                syslog: None,
            }
        );
        assert_eq!(parse(&["--system"]).unwrap().config, ConfigSource::System);
    }

    #[test]
    fn config_file_and_address_take_a_value_with_or_without_equals() {
        for args in [
            &["--config-file=/etc/a.conf", "--address=unix:path=/x"][..],
            &["--config-file", "/etc/a.conf", "--address", "unix:path=/x"][..],
        ] {
            let opts = parse(args).unwrap();
            assert_eq!(opts.config, ConfigSource::File("/etc/a.conf".into()));
            assert_eq!(opts.address.as_deref(), Some("unix:path=/x"));
        }
    }

    #[test]
    fn print_targets_default_to_stdout_or_take_a_descriptor() {
        let opts = parse(&["--session", "--print-address", "--print-pid"]).unwrap();
        assert_eq!(opts.print_address, Some(PrintTarget::Stdout));
        assert_eq!(opts.print_pid, Some(PrintTarget::Stdout));

        let opts = parse(&["--session", "--print-address=5", "--print-pid=7"]).unwrap();
        assert_eq!(opts.print_address, Some(PrintTarget::Fd(5)));
        assert_eq!(opts.print_pid, Some(PrintTarget::Fd(7)));

        // As dbus-daemon: the next argument is the descriptor unless it
        // is an option; an empty descriptor means stdout.
        let opts = parse(&["--print-address", "3", "--print-pid", "--session"]).unwrap();
        assert_eq!(opts.print_address, Some(PrintTarget::Fd(3)));
        assert_eq!(opts.print_pid, Some(PrintTarget::Stdout));
        let opts = parse(&["--session", "--print-address="]).unwrap();
        assert_eq!(opts.print_address, Some(PrintTarget::Stdout));
    }

    #[test]
    fn bad_descriptors_are_refused() {
        for (arg, shown) in [
            ("--print-address=abc", "abc"),
            ("--print-pid=-1", "-1"),
            ("--print-pid=99999999999", "99999999999"),
        ] {
            let exit = error(&["--session", arg]);
            assert_eq!(
                exit.message,
                format!("Invalid file descriptor: \"{shown}\"\n")
            );
        }
    }

    #[test]
    fn handover_version_prints_the_format_version_alone() {
        let exit = parse(&["--handover-version"]).unwrap_err();
        assert_eq!(exit.code, 0);
        assert!(exit.to_stdout);
        assert_eq!(
            exit.message,
            format!("{}\n", crate::restart::HANDOVER_VERSION)
        );
    }

    #[test]
    fn simple_flags_are_recorded() {
        let opts = parse(&[
            "--session",
            "--nopidfile",
            "--systemd-activation",
            "--introspect",
        ])
        .unwrap();
        assert!(opts.nopidfile && opts.systemd_activation && opts.introspect);
    }

    #[test]
    fn the_last_of_fork_and_nofork_wins_as_in_dbus_daemon() {
        let opts = parse(&["--session", "--fork"]).unwrap();
        assert!(opts.fork && !opts.nofork);
        let opts = parse(&["--session", "--nofork"]).unwrap();
        assert!(!opts.fork && opts.nofork);
        let opts = parse(&["--fork", "--session", "--nofork"]).unwrap();
        assert!(!opts.fork && opts.nofork);
        let opts = parse(&["--nofork", "--fork", "--session"]).unwrap();
        assert!(opts.fork && !opts.nofork);
    }

    #[test]
    fn syslog_options_combine_as_dbus_daemons_flags() {
        let mode = |args: &[&str]| parse(args).unwrap().syslog;
        assert_eq!(mode(&["--session"]), None);
        assert_eq!(mode(&["--session", "--syslog"]), Some(SyslogMode::Also));
        assert_eq!(
            mode(&["--session", "--syslog-only"]),
            Some(SyslogMode::Only)
        );
        assert_eq!(mode(&["--session", "--nosyslog"]), Some(SyslogMode::Off));
        assert_eq!(
            mode(&["--syslog-only", "--nosyslog", "--syslog", "--session"]),
            Some(SyslogMode::Only)
        );
        assert_eq!(
            mode(&["--syslog-only", "--nosyslog", "--session"]),
            Some(SyslogMode::Off)
        );
        assert_eq!(
            mode(&["--syslog", "--nosyslog", "--syslog", "--session"]),
            Some(SyslogMode::Also)
        );
    }

    #[test]
    fn no_configuration_is_an_error_unless_only_introspecting() {
        let expected = format!("No configuration file specified.\n{USAGE}\n");
        assert_eq!(error(&[]).message, expected);
        assert_eq!(error(&["--nofork"]).message, expected);
        assert!(parse(&["--introspect"]).unwrap().introspect);
    }

    #[test]
    fn a_second_configuration_names_the_first() {
        assert_eq!(
            error(&["--session", "--system"]).message,
            "--system specified but configuration file /usr/share/dbus-1/session.conf already requested\n"
        );
        assert_eq!(
            error(&["--system", "--session"]).message,
            "--session specified but configuration file /usr/share/dbus-1/system.conf already requested\n"
        );
        assert_eq!(
            error(&["--session", "--session"]).message,
            "--session specified but configuration file /usr/share/dbus-1/session.conf already requested\n"
        );
        assert_eq!(
            error(&["--config-file=a", "--config-file=a"]).message,
            "--config-file specified but configuration file a already requested\n"
        );
        assert_eq!(
            error(&["--config-file", "b", "--session"]).message,
            "--session specified but configuration file b already requested\n"
        );
    }

    #[test]
    fn repeated_single_options_are_refused() {
        assert_eq!(
            error(&["--session", "--address=a", "--address=b"]).message,
            "--address specified but address a already requested\n"
        );
        assert_eq!(
            error(&["--session", "--print-address=1", "--print-address=2"]).message,
            "--print-address specified but printing address to 1 already requested\n"
        );
        assert_eq!(
            error(&["--session", "--print-pid=1", "--print-pid"]).message,
            "--print-pid specified but printing pid to 1 already requested\n"
        );
    }

    #[test]
    fn unknown_options_and_stray_arguments_exit_with_status_1() {
        let exit = error(&["--session", "--bogus"]);
        assert!(exit.message.contains("--bogus"), "{}", exit.message);
        let exit = error(&["--session", "stray"]);
        assert!(exit.message.contains("stray"), "{}", exit.message);
        // A value where none is taken, a missing value.
        error(&["--session=yes"]);
        error(&["--session", "--config-file"]);
        // No prefix matching: dbus-daemon spells options out.
        error(&["--sess"]);
    }

    #[test]
    fn version_goes_to_stdout_with_status_0() {
        let exit = parse(&["--version"]).unwrap_err();
        assert_eq!(exit.code, 0);
        assert!(exit.to_stdout);
        let mut lines = exit.message.lines();
        assert_eq!(
            lines.next().unwrap(),
            format!("quickbus-daemon {}", env!("CARGO_PKG_VERSION"))
        );
        assert!(lines.next().unwrap().contains("dbus-daemon"));
        // --version needs no configuration and wins over one.
        assert_eq!(parse(&["--session", "--version"]).unwrap_err().code, 0);
    }

    #[test]
    fn help_lists_every_option_on_stdout() {
        let exit = parse(&["--help"]).unwrap_err();
        assert_eq!(exit.code, 0);
        assert!(exit.to_stdout);
        for option in [
            "--session",
            "--system",
            "--config-file",
            "--address",
            "--print-address",
            "--print-pid",
            "--fork",
            "--nofork",
            "--nopidfile",
            "--systemd-activation",
            "--introspect",
            "--syslog",
            "--syslog-only",
            "--nosyslog",
            "--version",
        ] {
            assert!(
                exit.message.contains(option),
                "{option} missing:\n{}",
                exit.message
            );
        }
    }
}
