//! `quickbus-conformance DAEMON`: runs dbus-daemon's own bus-facing tests
//! (Debian's dbus-tests package) against DAEMON, every subtest on its own
//! (a GLib test program stops at its first failed assertion), and prints
//! one PASS/FAIL/SKIP line per subtest and a summary. Exits 1 if any
//! subtest failed, 2 if the suite could not run at all.

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
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
}

impl Tally {
    fn report(&mut self, name: &str, outcome: &Outcome, log: &Path) {
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
    match conform(&args) {
        Ok(tally) if tally.failed == 0 => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("quickbus-conformance: {e}");
            ExitCode::from(2)
        }
    }
}

fn conform(args: &Args) -> Result<Tally, String> {
    let daemon =
        std::path::absolute(&args.daemon).map_err(|e| format!("{}: {e}", args.daemon.display()))?;
    if !is_executable(&daemon) {
        return Err(format!("{} is not an executable file", daemon.display()));
    }
    if !suite::installed(&args.tests, "test-dbus-daemon") {
        return Err(format!(
            "dbus's installed tests are not in {} (apt-get install dbus-tests)",
            args.tests.display()
        ));
    }
    let logs = match &args.log_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("quickbus-conformance.{}", std::process::id())),
    };
    let home = logs.join("home");
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    // Run from a copy other users can reach; the lines name the original.
    let shared = SharedDaemon::copy(&daemon)?;
    let env = Environment {
        daemon: shared.path().to_owned(),
        tests: args.tests.clone(),
        home,
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
        let subtests = suite::subtests_of(&env, program)
            .map_err(|e| format!("listing the subtests of {program}: {e}"))?;
        for subtest in subtests {
            if let Some(filter) = &args.filter {
                if !subtest.name().contains(filter.as_str()) {
                    continue;
                }
            }
            run_subtest(&env, &subtest, &logs, limit, &mut tally)
                .map_err(|e| format!("running {}: {e}", subtest.name()))?;
        }
    }
    // Logs of a clean run in a directory we made up are of no use: do not
    // leave one in /tmp per run.
    let where_logs = if args.log_dir.is_none() && tally.failed == 0 {
        let _ = std::fs::remove_dir_all(&logs);
        "removed, nothing failed".to_owned()
    } else {
        logs.display().to_string()
    };
    println!(
        "# daemon: {}; logs: {where_logs}; {}s",
        daemon.display(),
        started.elapsed().as_secs()
    );
    println!(
        "{} passed, {} failed, {} skipped",
        tally.passed, tally.failed, tally.skipped
    );
    Ok(tally)
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
