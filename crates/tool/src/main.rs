//! `quickbus`: talk to a D-Bus message bus from the command line.

#![forbid(unsafe_code)]

mod analysis;
mod args;
mod bench;
mod bus_monitor;
mod capture;
mod list;
mod monitor;
mod pcap;
mod print;
mod report;
mod sandbox;
mod stats;
mod top;

use std::process::ExitCode;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, Subcommand};
use quickbus_client::{CallError, Connection, MessageBuilder};
use quickbus_wire::flags;

#[derive(Parser, Debug)]
#[command(name = "quickbus", version, about = "Talk to a D-Bus message bus")]
struct Cli {
    /// Bus address (default: $DBUS_SESSION_BUS_ADDRESS)
    #[arg(long, global = true, value_name = "ADDRESS", conflicts_with = "system")]
    address: Option<String>,
    /// Use the system bus ($DBUS_SYSTEM_BUS_ADDRESS or /run/dbus/system_bus_socket)
    #[arg(long, global = true)]
    system: bool,
    /// Seconds to wait for the bus or a reply
    #[arg(long, global = true, value_name = "SECS", default_value_t = 25.0)]
    timeout: f64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Call a method and print the reply: DEST PATH INTERFACE.MEMBER [SIGNATURE [ARG...]]
    Call {
        destination: String,
        path: String,
        /// Interface and method joined by a dot, e.g. org.freedesktop.DBus.GetId
        method: String,
        /// busctl syntax: a signature, then the values (arrays as count then items,
        /// variants as signature then value, structs inline)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
        /// Do not print the reply
        #[arg(short, long)]
        quiet: bool,
        /// Wait for the reply (no: send and exit at once)
        #[arg(long, value_name = "BOOL", default_value = "yes", action = ArgAction::Set,
              value_parser = BoolishValueParser::new())]
        expect_reply: bool,
        /// Let the bus start the destination service if needed
        #[arg(long, value_name = "BOOL", default_value = "yes", action = ArgAction::Set,
              value_parser = BoolishValueParser::new())]
        auto_start: bool,
    },
    /// Emit a signal: PATH INTERFACE.MEMBER [SIGNATURE [ARG...]]
    Emit {
        path: String,
        /// Interface and signal name joined by a dot
        signal: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
        /// Send the signal to this name only (unicast)
        #[arg(long, value_name = "NAME")]
        destination: Option<String>,
    },
    /// List the names on the bus with their owners
    List {
        /// Only unique names (:1.N)
        #[arg(long, conflicts_with = "acquired")]
        unique: bool,
        /// Only well-known names
        #[arg(long)]
        acquired: bool,
    },
    /// Print every message on the bus (dbus-monitor's formats): [MATCH RULE...]
    Monitor(monitor::MonitorArgs),
    /// Record the bus to a pcap file (Wireshark, tshark, Bustle): -o FILE [MATCH RULE...]
    Capture(capture::CaptureArgs),
    /// Statistics of a capture: frequencies, method durations, sizes, top talkers
    Stats(stats::StatsArgs),
    /// One self-contained HTML page of a capture: FILE -o report.html
    Report(report::ReportArgs),
    /// Live view of the bus's connections from Debug.Stats (q quits)
    Top(top::TopArgs),
    /// Run COMMAND on its own container server (Containers1.AddServer),
    /// filtered by xdg-dbus-proxy's policy options: [POLICY...] -- COMMAND [ARG...]
    ///
    /// COMMAND runs with DBUS_SESSION_BUS_ADDRESS (with --system,
    /// DBUS_SYSTEM_BUS_ADDRESS) set to the container's socket. SIGTERM sent
    /// to quickbus is passed on to it, and so are SIGINT and SIGHUP unless
    /// the terminal sent them to both already (Ctrl-C). When it
    /// exits, the instance is stopped (StopInstance: its socket is removed
    /// and every connection made through it is closed).
    ///
    /// Without --filter or a policy option the app is not filtered: the bus
    /// only labels its connections with the instance (GetConnectionCredentials,
    /// GetConnectionInstance). --filter, or any of --see, --talk, --own,
    /// --call, --broadcast, turns filtering on, as xdg-dbus-proxy's --filter:
    /// the app may then talk to the bus driver and to nothing the options do
    /// not allow. The bus checks the options; a malformed one is refused.
    ///
    /// quickbus sandbox hides nothing by itself: COMMAND runs as the same
    /// user, and can still connect to the bus's own socket (or the system
    /// bus's) unless a sandbox (bwrap, a mount namespace) leaves only the
    /// container's socket in sight.
    ///
    /// Exit status: COMMAND's, or 128 + N if signal N killed it; 125 if the
    /// bus cannot be reached or refuses the container; 126 if COMMAND cannot
    /// be executed; 127 if it is not found; 2 for a usage error, and when no
    /// bus address is known (no --address and no DBUS_SESSION_BUS_ADDRESS).
    Sandbox(sandbox::SandboxArgs),
    /// Restart a quickbus-daemon in place, keeping every connection (root
    /// or the bus's user); returns when the new process serves
    Restart,
    /// Run the benchmark lab, quickbus-bench (built from the source tree, not
    /// packaged), with these arguments: e.g. `quickbus bench restart`
    #[command(disable_help_flag = true)]
    Bench {
        /// quickbus-bench's arguments (`quickbus bench --help` lists them)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Print quickbus(1), the manual page, in roff (for packaging)
    #[command(hide = true)]
    GenerateMan,
}

/// Why the tool failed, printed on stderr.
#[derive(Debug)]
pub struct Failure(String);

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        Failure(match e {
            CallError::Remote(e) => format!("Call failed: {}: {}", e.name, e.message),
            CallError::Connection(e) => format!("Call failed: {e}"),
        })
    }
}

impl From<quickbus_client::Error> for Failure {
    fn from(e: quickbus_client::Error) -> Failure {
        Failure(e.to_string())
    }
}

impl From<quickbus_wire::Error> for Failure {
    fn from(e: quickbus_wire::Error) -> Failure {
        Failure(e.to_string())
    }
}

/// quickbus(1) in roff, from the clap definitions (clap_mangen), with a
/// section per subcommand.
fn man_page() -> String {
    use clap::CommandFactory;
    let command = Cli::command();
    let mut page = Vec::new();
    let man = clap_mangen::Man::new(command.clone());
    // Writing to a Vec cannot fail.
    let _ = man.render(&mut page);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        page.extend_from_slice(format!(".SH \"QUICKBUS {}\"\n", name.to_uppercase()).as_bytes());
        page.extend_from_slice(format!(".B quickbus {name}\n").as_bytes());
        page.extend_from_slice(b".br\n");
        let sub_man = clap_mangen::Man::new(sub.clone());
        let mut section = Vec::new();
        let _ = sub_man.render_description_section(&mut section);
        let _ = sub_man.render_options_section(&mut section);
        // One page: the subcommand's own headings become paragraphs.
        let section = String::from_utf8_lossy(&section)
            .replace(".SH DESCRIPTION\n", "")
            .replace(".SH OPTIONS\n", ".PP\nOptions:\n");
        page.extend_from_slice(section.as_bytes());
    }
    String::from_utf8_lossy(&page).into_owned()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Sandbox(args) = &cli.command {
        return run_sandbox(&cli, args);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message)) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match &cli.command {
        Command::Stats(args) => return stats::run(args),
        Command::Report(args) => return report::run(args),
        Command::Bench { args } => return Err(bench::run(args)),
        Command::GenerateMan => {
            print!("{}", man_page());
            return Ok(());
        }
        _ => {}
    }
    let timeout = timeout_of(cli.timeout)?;
    match &cli.command {
        Command::Monitor(args) => return monitor::run(args, &bus_address(&cli)?, timeout),
        Command::Capture(args) => return capture::run(args, &bus_address(&cli)?, timeout),
        Command::Top(args) => return top::run(args, &bus_address(&cli)?, timeout),
        _ => {}
    }
    // Check the arguments before touching the bus.
    let prepared = prepare(&cli.command)?;
    let address = bus_address(&cli)?;
    let mut bus = Connection::connect_with_timeout(&address, timeout)?;
    match (&cli.command, prepared) {
        (
            Command::Call {
                quiet,
                expect_reply,
                ..
            },
            Some(message),
        ) => {
            if !expect_reply {
                bus.send(
                    message.flags(flags::NO_REPLY_EXPECTED | message_flags(&cli.command)),
                    &[],
                )?;
                return Ok(());
            }
            let reply = bus.call(message.flags(message_flags(&cli.command)))?;
            if !quiet {
                let text = print::format_body(reply.signature(), &reply.body_values()?);
                if !text.is_empty() {
                    println!("{text}");
                }
            }
            Ok(())
        }
        (Command::Emit { .. }, Some(message)) => {
            bus.send(message, &[])?;
            // A round trip to the bus: it has routed our signal before it
            // answers, so nothing is lost when we disconnect right away.
            bus.get_id()?;
            Ok(())
        }
        (Command::Restart, None) => {
            let call = MessageBuilder::method_call(quickbus_wire::BUS_PATH, "Restart")
                .interface(quickbus_wire::DAEMON_INTERFACE)
                .destination(quickbus_wire::BUS_NAME);
            bus.call(call)?;
            Ok(())
        }
        (Command::List { unique, acquired }, None) => {
            let filter = match (unique, acquired) {
                (true, _) => list::Filter::Unique,
                (_, true) => list::Filter::Acquired,
                _ => list::Filter::All,
            };
            let rows = list::collect(&mut bus, filter)?;
            print!("{}", list::format_table(&rows));
            Ok(())
        }
        _ => unreachable!("prepare() matches the command"),
    }
}

/// `quickbus sandbox`, whose exit status is COMMAND's. With --system the
/// container's address goes into DBUS_SYSTEM_BUS_ADDRESS.
fn run_sandbox(cli: &Cli, args: &sandbox::SandboxArgs) -> ExitCode {
    let kind = if cli.system {
        sandbox::BusKind::System
    } else {
        sandbox::BusKind::Session
    };
    match timeout_of(cli.timeout).and_then(|timeout| Ok((bus_address(cli)?, timeout))) {
        Ok((address, timeout)) => sandbox::run(args, &address, kind, timeout),
        Err(Failure(message)) => {
            eprintln!("{message}");
            ExitCode::from(2)
        }
    }
}

/// --address, --system, or the session bus.
fn bus_address(cli: &Cli) -> Result<String, Failure> {
    Ok(match (&cli.address, cli.system) {
        (Some(address), _) => address.clone(),
        (None, true) => quickbus_client::system_bus_address(),
        (None, false) => std::env::var("DBUS_SESSION_BUS_ADDRESS").map_err(|_| {
            Failure("DBUS_SESSION_BUS_ADDRESS is not set; use --address or --system".into())
        })?,
    })
}

fn message_flags(command: &Command) -> u8 {
    match command {
        Command::Call {
            auto_start: false, ..
        } => flags::NO_AUTO_START,
        _ => 0,
    }
}

fn timeout_of(secs: f64) -> Result<Duration, Failure> {
    if !(secs.is_finite() && secs > 0.0) {
        return Err(Failure(format!(
            "invalid --timeout {secs}: must be a positive number of seconds"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The message a call or emit will send, with its arguments checked.
fn prepare(command: &Command) -> Result<Option<MessageBuilder>, Failure> {
    use quickbus_wire::names;
    let message = match command {
        Command::Call {
            destination,
            path,
            method,
            args,
            ..
        } => {
            if !names::is_valid_bus_name(destination) {
                return Err(Failure(format!("Invalid service name: {destination}")));
            }
            let (interface, member) = split_member(method)?;
            check_path(path)?;
            MessageBuilder::method_call(path, member)
                .interface(interface)
                .destination(destination)
                .body(args::parse_args(args).map_err(Failure)?)
        }
        Command::Emit {
            path,
            signal,
            args,
            destination,
        } => {
            let (interface, member) = split_member(signal)?;
            check_path(path)?;
            let mut message = MessageBuilder::signal(path, interface, member)
                .body(args::parse_args(args).map_err(Failure)?);
            if let Some(destination) = destination {
                if !names::is_valid_bus_name(destination) {
                    return Err(Failure(format!("Invalid service name: {destination}")));
                }
                message = message.destination(destination);
            }
            message
        }
        _ => return Ok(None),
    };
    Ok(Some(message))
}

fn check_path(path: &str) -> Result<(), Failure> {
    if quickbus_wire::names::is_valid_object_path(path) {
        Ok(())
    } else {
        Err(Failure(format!("Invalid object path: {path}")))
    }
}

/// `org.example.Iface.Member` -> (`org.example.Iface`, `Member`).
fn split_member(joined: &str) -> Result<(&str, &str), Failure> {
    use quickbus_wire::names;
    let (interface, member) = joined
        .rsplit_once('.')
        .ok_or_else(|| Failure(format!("{joined:?} is not INTERFACE.MEMBER")))?;
    if !names::is_valid_interface(interface) {
        return Err(Failure(format!("Invalid interface name: {interface}")));
    }
    if !names::is_valid_member(member) {
        return Err(Failure(format!("Invalid member name: {member}")));
    }
    Ok((interface, member))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every visible subcommand and every long option, the subcommands'
    /// own included, is on the manual page.
    #[test]
    fn the_manual_page_documents_every_subcommand_and_option() {
        let page = man_page();
        assert!(page.contains(".TH quickbus 1"), "{page}");
        let roff = |long: &str| format!("\\-\\-{}", long.replace('-', "\\-"));
        let command = Cli::command();
        let mut options = 0;
        for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                assert!(page.contains(&roff(long)), "--{long} missing");
                options += 1;
            }
        }
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            let heading = format!(".SH \"QUICKBUS {}\"", sub.get_name().to_uppercase());
            assert!(page.contains(&heading), "{heading} missing");
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = arg.get_long() {
                    assert!(
                        page.contains(&roff(long)),
                        "quickbus {} --{long} missing",
                        sub.get_name()
                    );
                    options += 1;
                }
            }
        }
        assert!(options > 15, "only {options} options found");
        assert!(!page.contains("generate\\-man"));
        // The sandbox's exit statuses and filtering rule are on the page.
        assert!(page.contains("128 + N if signal N killed it"), "{page}");
        assert!(
            page.contains("Without \\-\\-filter or a policy option"),
            "{page}"
        );
    }

    #[test]
    fn interface_and_member_are_split_at_the_last_dot() {
        assert_eq!(
            split_member("org.freedesktop.DBus.GetNameOwner").unwrap(),
            ("org.freedesktop.DBus", "GetNameOwner")
        );
        assert!(split_member("GetId").is_err());
        assert!(split_member("org.freedesktop.DBus.").is_err());
        assert!(split_member("nodots.Member").is_err());
    }

    #[test]
    fn call_arguments_may_start_with_a_dash() {
        let cli = Cli::try_parse_from([
            "quickbus",
            "--address",
            "unix:path=/x",
            "call",
            "a.b",
            "/",
            "a.b.C",
            "i",
            "-5",
        ])
        .unwrap();
        match cli.command {
            Command::Call { args, .. } => assert_eq!(args, ["i", "-5"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn boolean_options_take_busctl_values() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["quickbus", "call"];
            argv.extend_from_slice(extra);
            argv.extend_from_slice(&["a.b", "/", "a.b.C"]);
            match Cli::try_parse_from(argv).unwrap().command {
                Command::Call {
                    expect_reply,
                    auto_start,
                    ..
                } => (expect_reply, auto_start),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(parse(&[]), (true, true));
        assert_eq!(
            parse(&["--expect-reply=no", "--auto-start=false"]),
            (false, false)
        );
        assert_eq!(
            parse(&["--expect-reply", "yes", "--auto-start=0"]),
            (true, false)
        );
    }

    #[test]
    fn address_and_system_conflict() {
        assert!(Cli::try_parse_from(["quickbus", "--system", "--address", "x", "list"]).is_err());
    }

    #[test]
    fn bad_names_fail_before_connecting() {
        let cli = Cli::try_parse_from([
            "quickbus",
            "--address",
            "unix:path=/nonexistent",
            "call",
            "a.b",
            "not a path",
            "a.b.C",
        ])
        .unwrap();
        let Failure(message) = run(cli).unwrap_err();
        assert!(message.contains("Invalid object path"), "{message}");
    }

    #[test]
    fn bad_timeouts_are_rejected() {
        assert!(timeout_of(0.0).is_err());
        assert!(timeout_of(f64::NAN).is_err());
        assert_eq!(timeout_of(1.5).unwrap(), Duration::from_millis(1500));
    }
}
