//! `quickbus sandbox [POLICY...] -- COMMAND [ARG...]`: run COMMAND on its
//! own container server (org.freedesktop.DBus.Containers1.AddServer), so
//! that the bus knows which app each of its connections is and, with a
//! policy, filters what it may see and do. xdg-dbus-proxy's command line,
//! without the proxy: the bus itself applies the rules.
//!
//! The launcher stays connected while COMMAND runs (the instance belongs
//! to that connection), passes SIGTERM (and SIGINT and SIGHUP that the
//! terminal did not send to COMMAND already) on to COMMAND,
//! and when COMMAND exits, calls StopInstance and exits as COMMAND did.

mod child;
pub use child::BusKind;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use quickbus_client::containers1 as container;
use quickbus_client::Connection;

use child::Running;
use container::{Instance, Request};

/// The container type when `--type` is not given.
const DEFAULT_TYPE: &str = "org.quickbus.Sandbox";

/// The launcher's own failure (no bus, AddServer refused), as `env`,
/// `timeout` and `chroot` report theirs, apart from COMMAND's statuses.
const LAUNCHER_FAILED: u8 = 125;

#[derive(Args, Debug)]
pub struct SandboxArgs {
    /// Filter the app's messages even with no policy option (it may then
    /// talk only to the bus driver)
    #[arg(long)]
    pub filter: bool,
    /// Let the app see NAME (a name ending in .* is a prefix)
    #[arg(long, value_name = "NAME")]
    pub see: Vec<String>,
    /// Let the app talk to NAME (a name ending in .* is a prefix)
    #[arg(long, value_name = "NAME")]
    pub talk: Vec<String>,
    /// Let the app own NAME (a name ending in .* is a prefix)
    #[arg(long, value_name = "NAME")]
    pub own: Vec<String>,
    /// Let the app call the methods RULE ([METHOD][@PATH], as
    /// xdg-dbus-proxy) of NAME
    #[arg(long, value_name = "NAME=RULE")]
    pub call: Vec<String>,
    /// Let the app receive the broadcasts RULE ([METHOD][@PATH]) of NAME
    #[arg(long, value_name = "NAME=RULE")]
    pub broadcast: Vec<String>,
    /// The container type, with the syntax of an interface name (Flatpak
    /// would say org.flatpak)
    #[arg(long = "type", value_name = "TYPE", default_value = DEFAULT_TYPE)]
    pub container_type: String,
    /// The app's name within its type (default: COMMAND's file name)
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Metadata of the instance, as a string (repeatable); GetInstanceInfo
    /// returns it
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_metadata)]
    pub metadata: Vec<(String, String)>,
    /// The program to run and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

impl SandboxArgs {
    /// The value of the filtering named argument: `None` (not filtered)
    /// unless `--filter` or a policy option was given; each option spelled
    /// as on xdg-dbus-proxy's command line, for the bus to check.
    pub fn filter_options(&self) -> Option<Vec<String>> {
        let kinds = [
            ("see", &self.see),
            ("talk", &self.talk),
            ("own", &self.own),
            ("call", &self.call),
            ("broadcast", &self.broadcast),
        ];
        let options: Vec<String> = kinds
            .iter()
            .flat_map(|(kind, values)| values.iter().map(move |v| format!("--{kind}={v}")))
            .collect();
        (self.filter || !options.is_empty()).then_some(options)
    }

    pub fn request(&self) -> Request {
        Request {
            container_type: self.container_type.clone(),
            name: self.name.clone().unwrap_or_else(|| self.app_name()),
            metadata: self.metadata.clone(),
            filter: self.filter_options(),
        }
    }

    /// COMMAND's file name: `/usr/bin/foo` -> `foo`.
    fn app_name(&self) -> String {
        let program = Path::new(&self.command[0]);
        program
            .file_name()
            .unwrap_or(program.as_os_str())
            .to_string_lossy()
            .into_owned()
    }
}

fn parse_metadata(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// Runs the sandbox: the exit status is COMMAND's, or one of the
/// launcher's own (documented on `quickbus sandbox --help`).
pub fn run(args: &SandboxArgs, address: &str, kind: BusKind, timeout: Duration) -> ExitCode {
    let mut bus = match Connection::connect_with_timeout(address, timeout) {
        Ok(bus) => bus,
        Err(e) => return failed(connect_failure(address, e)),
    };
    let instance = match container::add_server(&mut bus, &args.request()) {
        Ok(instance) => instance,
        Err(message) => return failed(message),
    };
    let program = args.command[0].to_string_lossy().into_owned();
    let running = Running::start(child::command(&args.command, kind, &instance.address));
    let code = match running.and_then(Running::wait) {
        Ok(status) => child::exit_code(status),
        Err(e) => {
            eprintln!("cannot run {program}: {e}");
            child::exit_code_of_spawn_error(&e)
        }
    };
    stop(&mut bus, &instance);
    ExitCode::from(code)
}

/// StopInstance; a failure is reported but does not change the exit
/// status: when the launcher exits, its connection closes and the bus
/// stops listening on the instance's socket anyway.
fn stop(bus: &mut Connection, instance: &Instance) {
    if let Err(e) = container::stop_instance(bus, instance) {
        eprintln!("cannot stop the container instance {}: {e}", instance.path);
    }
}

/// One line naming the bus, said once.
fn connect_failure(address: &str, error: quickbus_client::Error) -> String {
    use quickbus_client::Error;
    match error {
        Error::Connect { .. } | Error::Address { .. } | Error::NoSupportedAddress(_) => {
            error.to_string()
        }
        other => format!("cannot connect to the bus at {address}: {other}"),
    }
}

fn failed(message: String) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(LAUNCHER_FAILED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        sandbox: SandboxArgs,
    }

    fn parse(argv: &[&str]) -> SandboxArgs {
        let argv = std::iter::once("sandbox").chain(argv.iter().copied());
        Cli::try_parse_from(argv).unwrap().sandbox
    }

    #[test]
    fn no_policy_option_means_no_filtering() {
        let args = parse(&["--", "app"]);
        assert_eq!(args.filter_options(), None);
        assert_eq!(args.request().filter, None);
    }

    #[test]
    fn filter_alone_is_filtering_with_no_rules() {
        assert_eq!(parse(&["--filter", "app"]).filter_options(), Some(vec![]));
    }

    #[test]
    fn policy_options_are_passed_as_xdg_dbus_proxy_spells_them() {
        let args = parse(&[
            "--talk=org.example.Foo",
            "--see",
            "org.example.Seen.*",
            "--own=org.example.App",
            "--call=org.example.Bar=Method@/path",
            "--broadcast=org.example.Bar=*@/signals/*",
            "--talk=org.example.Baz",
            "--",
            "app",
        ]);
        assert_eq!(
            args.filter_options().unwrap(),
            [
                "--see=org.example.Seen.*",
                "--talk=org.example.Foo",
                "--talk=org.example.Baz",
                "--own=org.example.App",
                "--call=org.example.Bar=Method@/path",
                "--broadcast=org.example.Bar=*@/signals/*",
            ]
        );
    }

    #[test]
    fn the_command_keeps_its_own_options() {
        let args = parse(&["--talk=a.b", "--", "/usr/bin/app", "--talk=x", "-v"]);
        assert_eq!(args.command, ["/usr/bin/app", "--talk=x", "-v"]);
        assert_eq!(args.talk, ["a.b"]);
        // The first word that is not an option starts COMMAND even without --.
        let args = parse(&["app", "--filter"]);
        assert_eq!(args.command, ["app", "--filter"]);
        assert!(!args.filter);
    }

    #[test]
    fn the_name_defaults_to_the_commands_file_name() {
        let request = parse(&["--", "/usr/bin/app", "x"]).request();
        assert_eq!(request.name, "app");
        assert_eq!(request.container_type, DEFAULT_TYPE);
        let request = parse(&["--name=org.example.App", "--type=org.flatpak", "app"]).request();
        assert_eq!(request.name, "org.example.App");
        assert_eq!(request.container_type, "org.flatpak");
    }

    #[test]
    fn metadata_is_key_equals_value() {
        let args = parse(&["--metadata=Version=1=2", "--metadata", "Empty=", "app"]);
        assert_eq!(
            args.metadata,
            [
                ("Version".to_owned(), "1=2".to_owned()),
                ("Empty".to_owned(), String::new())
            ]
        );
        for bad in ["--metadata=novalue", "--metadata==x"] {
            let error = Cli::try_parse_from(["sandbox", bad, "app"]).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn a_command_is_required() {
        for argv in [
            &["sandbox"][..],
            &["sandbox", "--talk=a.b"],
            &["sandbox", "--"],
        ] {
            let error = Cli::try_parse_from(argv).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{argv:?}");
        }
    }
}
