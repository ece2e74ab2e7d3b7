//! The closing report of the test command (scripts/test-report.sh, sourced
//! by scripts/test.sh): after a failure its last line says the run FAILED
//! and at which step, and what did not run is listed either way; a clean
//! run alone may say nothing was skipped. Each step says how long it took.

use std::path::PathBuf;
use std::process::Command;

use quickbus_e2e::{run_bounded, Finished};

fn report_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-report.sh")
}

/// Runs `steps` (bash) as scripts/test.sh runs its own: `set -euo
/// pipefail`, then the report sourced.
fn run_steps(steps: &str) -> Finished {
    let script = format!("set -euo pipefail\nsource \"$0\"\n{steps}");
    run_bounded(
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg(report_script()),
    )
}

fn last_line(text: &str) -> &str {
    text.trim_end().lines().last().unwrap_or("")
}

#[test]
fn a_failed_run_ends_saying_so_and_at_which_step() {
    let out = run_steps("step build\nlogged echo built\nstep 'cargo test --workspace'\nfalse");
    assert_eq!(out.status.code(), Some(1), "{out:#?}");
    assert_eq!(
        last_line(&out.stdout),
        "==> FAILED at step \"cargo test --workspace\" (exit status 1); the steps after it did not run",
        "{out:#?}"
    );
    assert!(
        !out.stdout.contains("nothing was skipped or ignored\n"),
        "{out:#?}"
    );
}

#[test]
fn a_failed_run_still_lists_what_did_not_run() {
    let out = run_steps(
        "step tests\nlogged echo 'test slow ... ignored, takes an hour'\n\
         logged echo 'SKIPPED: policy::rules: needs root'\nlogged false",
    );
    assert_eq!(out.status.code(), Some(1), "{out:#?}");
    assert!(
        out.stdout
            .contains("did not run in the steps that ran (2 lines):\ntest slow ... ignored, takes an hour\nSKIPPED: policy::rules: needs root\n"),
        "{out:#?}"
    );
    assert!(last_line(&out.stdout).starts_with("==> FAILED at step \"tests\""));
}

#[test]
fn only_a_clean_run_says_nothing_was_skipped() {
    let out = run_steps("step tests\nlogged echo 'test a ... ok'\nall_passed");
    assert!(out.status.success(), "{out:#?}");
    assert!(says_how_long(&out.stdout, "tests"), "{out:#?}");
    // The end of the steps is no step: no time of its own.
    assert!(out.stdout.contains("\n==> all checks passed\n"), "{out:#?}");
    assert!(!out.stdout.contains("s: all checks passed"), "{out:#?}");
    assert_eq!(
        last_line(&out.stdout),
        "==> nothing was skipped or ignored",
        "{out:#?}"
    );
    assert!(!out.stdout.contains("FAILED"), "{out:#?}");
}

/// Whether `stdout` has the line that says how long `step` took
/// (`==> took N s: STEP`), whatever N is.
fn says_how_long(stdout: &str, step: &str) -> bool {
    stdout.lines().any(|line| {
        line.strip_prefix("==> took ")
            .and_then(|rest| rest.strip_suffix(&format!(" s: {step}")))
            .is_some_and(|seconds| seconds.parse::<u64>().is_ok())
    })
}

#[test]
fn each_step_says_how_long_it_took_the_failed_one_too() {
    let out = run_steps("step build\nlogged echo built\nstep tests\nfalse");
    assert_eq!(out.status.code(), Some(1), "{out:#?}");
    assert!(says_how_long(&out.stdout, "build"), "{out:#?}");
    assert!(says_how_long(&out.stdout, "tests"), "{out:#?}");
}
