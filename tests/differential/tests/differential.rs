//! Runs every scenario against dbus-daemon (the reference) and against the
//! built quickbus-daemon, compares what each bus's monitor and each client
//! received, and fails on any difference `differences.toml` does not list,
//! and on any listed difference that no longer occurs.
//!
//! Environment:
//! - `QUICKBUS_REFERENCE_DAEMON`: the reference (default /usr/bin/dbus-daemon);
//! - `QUICKBUS_DIFF_DAEMON`: the daemon under test (default: the workspace's
//!   quickbus-daemon next to this test's target directory);
//! - `QUICKBUS_DIFF_ONLY`: run only scenarios whose name contains this (the
//!   list's checks are then skipped, since most of it would look stale);
//! - `QUICKBUS_DIFF_SHOW`: print both transcripts of every scenario run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use quickbus_differential::compare::{diff, in_parallel, print_transcript};
use quickbus_differential::differences;
use quickbus_differential::scenarios::{self, Scenario};
use quickbus_differential::script::{Script, Transcript};

const WORKERS: usize = 4;
/// A scenario pair taking longer than this is reported (not failed).
const SLOW: std::time::Duration = std::time::Duration::from_secs(5);

fn reference_daemon() -> PathBuf {
    let path = std::env::var_os("QUICKBUS_REFERENCE_DAEMON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/dbus-daemon"));
    assert!(
        path.is_file(),
        "no reference daemon at {} (install dbus-daemon or set QUICKBUS_REFERENCE_DAEMON)",
        path.display()
    );
    path
}

/// One scenario on one daemon; `helper` is the activatable service program
/// that `{helper}` in service files stands for.
fn run(program: &Path, scenario: &Scenario, helper: &Path) -> Transcript {
    let helper = helper.display().to_string();
    let services: Vec<(String, String)> = scenario
        .services
        .iter()
        .map(|(file, text)| (file.clone(), text.replace("{helper}", &helper)))
        .collect();
    let mut script = Script::start(program, &scenario.config, &services);
    (scenario.run)(&mut script);
    script.finish()
}

#[test]
fn quickbus_answers_every_scenario_as_dbus_daemon_does_or_as_listed() {
    let started = Instant::now();
    let reference = reference_daemon();
    let quickbus = quickbus_differential::daemon::quickbus_daemon();
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_activatable"));
    let only = std::env::var("QUICKBUS_DIFF_ONLY").ok();
    let show_all = std::env::var_os("QUICKBUS_DIFF_SHOW").is_some();
    let all: Vec<Scenario> = scenarios::all()
        .into_iter()
        .filter(|s| !matches!(only.as_deref(), Some(o) if !s.name.contains(o)))
        .collect();
    let names: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
    differences::assert_unique(&names);

    let differences = in_parallel(&all, WORKERS, |scenario| {
        let clock = Instant::now();
        let theirs = run(&reference, scenario, &helper);
        let ours = run(&quickbus, scenario, &helper);
        if clock.elapsed() > SLOW {
            // Only a wait that gave up takes this long: worth a look.
            println!(
                "slow: {} took {:.1} s",
                scenario.name,
                clock.elapsed().as_secs_f64()
            );
        }
        if show_all {
            print_transcript(&scenario.name, "dbus-daemon", &theirs);
            print_transcript(&scenario.name, "quickbus", &ours);
        }
        diff(&theirs, &ours)
    });
    let results: Vec<(usize, Option<String>)> = differences.into_iter().enumerate().collect();

    let list_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("differences.toml");
    let list = differences::load(&list_path);
    let differing: Vec<String> = results
        .iter()
        .filter(|(_, d)| d.is_some())
        .map(|(i, _)| names[*i].clone())
        .collect();
    let verdict = differences::judge(&list, &names, &differing);

    let mut report = String::new();
    for (index, difference) in &results {
        let Some(difference) = difference else {
            continue;
        };
        let name = &names[*index];
        match verdict.listed.iter().find(|(n, _)| n == name) {
            Some((_, entry)) => {
                let entry = &list.entries[*entry];
                let pending = entry
                    .pending
                    .as_deref()
                    .map(|p| format!(" [pending: {p}]"))
                    .unwrap_or_default();
                if show_all || only.is_some() {
                    report.push_str(&format!("LISTED {name}{pending}:\n{difference}"));
                } else {
                    report.push_str(&format!("listed difference: {name}{pending}\n"));
                }
            }
            None => report.push_str(&format!("UNLISTED DIFFERENCE {name}:\n{difference}")),
        }
    }
    print!("{report}");
    let pending = verdict
        .listed
        .iter()
        .filter(|(_, e)| list.entries[*e].pending.is_some())
        .count();
    println!(
        "differential: {} scenarios in {:.1} s: {} identical, {} differ as listed ({} of them pending a fix), {} differ unlisted",
        names.len(),
        started.elapsed().as_secs_f64(),
        names.len() - differing.len(),
        verdict.listed.len(),
        pending,
        verdict.unlisted.len(),
    );
    verdict.assert_holds(&list_path, "scenarios", "dbus-daemon", only.is_none());
    assert!(
        names.len() >= 100 || only.is_some(),
        "only {} scenarios",
        names.len()
    );
}
