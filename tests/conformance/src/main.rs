//! `quickbus-conformance DAEMON`: runs dbus-daemon's own bus-facing tests
//! (Debian's dbus-tests package) against DAEMON, every subtest on its own
//! (a GLib test program stops at its first failed assertion), and prints
//! one PASS/FAIL/SKIP line per subtest and a summary. Exits 1 if any
//! subtest failed, 2 if the suite could not run at all.
//!
//! `quickbus-conformance --containers-build BUILD DAEMON`: instead, dbus's
//! test-containers from a build with Containers1 (containers.rs), against
//! BUILD's dbus-daemon and then DAEMON. Exits 1 unless DAEMON passed every
//! subtest the reference passed, with no skip on either.

mod containers;
mod run;
mod shared;
mod suite;
mod tap;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use run::{run_logged, Ended, Environment};
use shared::SharedDaemon;
use suite::Subtest;
use tap::Outcome;

#[derive(Parser, Debug)]
#[command(about = "Run dbus-daemon's installed bus tests against a bus daemon")]
struct Args {
    /// The daemon to test (it must take dbus-daemon's command line).
    daemon: PathBuf,
    /// Where Debian's dbus-tests package installed the tests.
    #[arg(
        long,
        env = "DBUS_INSTALLED_TESTS",
        default_value = "/usr/lib/dbus-1.0/installed-tests/dbus"
    )]
    tests: PathBuf,
    /// Seconds a subtest may take before it counts as failed (hung).
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Run only these programs (e.g. test-monitor); repeatable.
    #[arg(long = "only", value_name = "PROGRAM")]
    only: Vec<String>,
    /// Run only subtests whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// Keep each subtest's output here (default: a new directory in /tmp).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// Run test-containers from this dbus build (what
    /// scripts/build-dbus-containers.sh prints) against its dbus-daemon,
    /// then against DAEMON, instead of the installed suites.
    #[arg(long, value_name = "BUILD")]
    containers_build: Option<PathBuf>,
    /// With --containers-build: the SupportedArguments DAEMON offers
    /// (comma separated; "" for none, as dbus-daemon).
    #[arg(long, default_value = "org.quickbus.Filter")]
    supported_arguments: String,
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
    /// Every subtest's outcome, in the order run.
    outcomes: Vec<(String, Outcome)>,
}

impl Tally {
    fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }

    fn report(&mut self, name: &str, outcome: &Outcome, log: &Path) {
        self.outcomes.push((name.to_owned(), outcome.clone()));
        let line = match outcome {
            Outcome::Pass => {
                self.passed += 1;
                format!("PASS {name}")
            }
            Outcome::Skip(reason) => {
                self.skipped += 1;
                format!("SKIP {name}  ({reason})")
            }
            Outcome::Fail(reason) => {
                self.failed += 1;
                format!("FAIL {name}  ({reason}; log {})", log.display())
            }
        };
        println!("{line}");
        let _ = std::io::stdout().flush();
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let passed = match &args.containers_build {
        Some(build) => conform_containers(&args, build),
        None => conform(&args).map(|tally| tally.failed == 0),
    };
    match passed {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("quickbus-conformance: {e}");
            ExitCode::from(2)
        }
    }
}

fn executable(path: &Path) -> Result<PathBuf, String> {
    let absolute = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !is_executable(&absolute) {
        return Err(format!("{} is not an executable file", absolute.display()));
    }
    Ok(absolute)
}

/// Where a run's logs go: `--log-dir`, or a new directory in /tmp.
fn log_dir(args: &Args) -> PathBuf {
    match &args.log_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("quickbus-conformance.{}", std::process::id())),
    }
}

/// Logs of a clean run in a directory we made up are of no use: do not
/// leave one in /tmp per run. Says where the logs are.
fn keep_logs_if(failed: bool, args: &Args, logs: &Path) -> String {
    if args.log_dir.is_none() && !failed {
        let _ = std::fs::remove_dir_all(logs);
        "removed, nothing failed".to_owned()
    } else {
        logs.display().to_string()
    }
}

fn conform(args: &Args) -> Result<Tally, String> {
    let daemon = executable(&args.daemon)?;
    if !suite::installed(&args.tests, "test-dbus-daemon") {
        return Err(format!(
            "dbus's installed tests are not in {} (apt-get install dbus-tests)",
            args.tests.display()
        ));
    }
    let logs = log_dir(args);
    let home = logs.join("home");
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    // Run from a copy other users can reach; the lines name the original.
    let shared = SharedDaemon::copy(&daemon)?;
    let env = Environment {
        daemon: shared.path().to_owned(),
        tests: args.tests.clone(),
        home,
        extra: Vec::new(),
    };
    let limit = Duration::from_secs(args.timeout);
    let started = Instant::now();
    let mut tally = Tally::default();
    for program in suite::BUS_PROGRAMS {
        if !args.only.is_empty() && !args.only.iter().any(|p| p == program) {
            continue;
        }
        if !suite::installed(&args.tests, program) {
            let log = logs.join(format!("{program}.log"));
            tally.report(program, &Outcome::Fail("not installed".into()), &log);
            continue;
        }
        run_program(&env, program, args, &logs, limit, &mut tally)?;
    }
    let where_logs = keep_logs_if(tally.failed > 0, args, &logs);
    println!(
        "# daemon: {}; logs: {where_logs}; {}s",
        daemon.display(),
        started.elapsed().as_secs()
    );
    println!("{}", tally.summary());
    Ok(tally)
}

/// Every subtest of `program` (those `--filter` keeps), each on its own.
fn run_program(
    env: &Environment,
    program: &str,
    args: &Args,
    logs: &Path,
    limit: Duration,
    tally: &mut Tally,
) -> Result<(), String> {
    let subtests = suite::subtests_of(env, program)
        .map_err(|e| format!("listing the subtests of {program}: {e}"))?;
    for subtest in subtests {
        if let Some(filter) = &args.filter {
            if !subtest.name().contains(filter.as_str()) {
                continue;
            }
        }
        run_subtest(env, &subtest, logs, limit, tally)
            .map_err(|e| format!("running {}: {e}", subtest.name()))?;
    }
    Ok(())
}

/// test-containers against the build's reference daemon, then against
/// `args.daemon`; true when the daemon fell short of the reference nowhere.
fn conform_containers(args: &Args, build: &Path) -> Result<bool, String> {
    let daemon = executable(&args.daemon)?;
    let build = containers::Build::at(build)?;
    let reference = executable(&build.reference)?;
    let is_root = rustix::process::geteuid().is_root();
    if let Some(note) = containers::socket_directory(is_root)? {
        println!("# {note}");
    }
    let logs = log_dir(args);
    let limit = Duration::from_secs(args.timeout);
    let started = Instant::now();
    // Upstream's expectation (no named argument) for the reference; the
    // daemon under test's own for it.
    let runs = [
        ("reference", &reference, String::new()),
        ("tested", &daemon, args.supported_arguments.clone()),
    ];
    let mut tallies = Vec::new();
    for (role, path, supported) in runs {
        let home = logs.join(role).join("home");
        std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
        println!(
            "# {} against the {role} daemon {} ({}={supported:?})",
            containers::PROGRAM,
            path.display(),
            containers::SUPPORTED_ARGUMENTS_VAR
        );
        let env = Environment {
            daemon: path.clone(),
            tests: build.tests.clone(),
            home,
            extra: vec![(containers::SUPPORTED_ARGUMENTS_VAR.to_owned(), supported)],
        };
        let mut tally = Tally::default();
        run_program(
            &env,
            containers::PROGRAM,
            args,
            &logs.join(role),
            limit,
            &mut tally,
        )?;
        println!("# {role}: {}", tally.summary());
        tallies.push(tally);
    }
    let (reference_run, tested_run) = (&tallies[0], &tallies[1]);
    let shortfalls = containers::shortfalls(&reference_run.outcomes, &tested_run.outcomes);
    for shortfall in &shortfalls {
        println!("SHORT {}: {}", shortfall.subtest, shortfall.why);
    }
    let passed = shortfalls.is_empty() && reference_run.passed > 0;
    let where_logs = keep_logs_if(!passed, args, &logs);
    println!("# logs: {where_logs}; {}s", started.elapsed().as_secs());
    let verdict = if reference_run.passed == 0 {
        "the reference passed nothing: the build or this machine is broken".to_owned()
    } else if passed {
        format!(
            "{} passed all {} subtests the reference passed, none skipped",
            daemon.display(),
            reference_run.passed
        )
    } else {
        format!(
            "{} fell short of the reference on {} of its {} subtests",
            daemon.display(),
            shortfalls.len(),
            reference_run.outcomes.len()
        )
    };
    println!("{}: {verdict}", containers::PROGRAM);
    Ok(passed)
}

fn run_subtest(
    env: &Environment,
    subtest: &Subtest,
    logs: &Path,
    limit: Duration,
    tally: &mut Tally,
) -> std::io::Result<()> {
    let program = env.tests.join(&subtest.program);
    let log = logs.join(format!(
        "{}{}.log",
        subtest.program,
        subtest.path.replace('/', "_")
    ));
    let args: Vec<&str> = if subtest.is_script() {
        vec!["--tap"]
    } else {
        vec!["-p", &subtest.path, "--tap"]
    };
    let (ended, output) = run_logged(env, &program, &args, &log, limit)?;
    let hung = |outcome: Outcome| match (&ended, outcome) {
        (Ended::TimedOut(after), Outcome::Fail(_)) => {
            Outcome::Fail(format!("timed out after {}s", after.as_secs()))
        }
        (_, outcome) => outcome,
    };
    if !subtest.is_script() {
        let outcome = hung(tap::verdict(&subtest.path, ended.success(), &output));
        tally.report(&subtest.name(), &outcome, &log);
        return Ok(());
    }
    if let Some(reason) = tap::skipped_plan(&output) {
        tally.report(&subtest.program, &Outcome::Skip(reason), &log);
        return Ok(());
    }
    for number in suite::script_numbers(&output) {
        let outcome = hung(tap::verdict(&number, ended.success(), &output));
        let each = Subtest {
            program: subtest.program.clone(),
            path: number,
        };
        tally.report(&each.name(), &outcome, &log);
    }
    Ok(())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
