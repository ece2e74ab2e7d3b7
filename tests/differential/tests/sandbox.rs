//! The sandbox differential test (issue 26): every case of
//! `quickbus_differential::sandbox::cases` on the reference (xdg-dbus-proxy
//! in front of dbus-daemon) and on a side under test; what the filtered app
//! saw and what each service received must agree, or differ as the side's
//! list of differences says (with a reason each).
//!
//! - `the_container_filter_answers_as_xdg_dbus_proxy`: the side under test
//!   is a quickbus Containers1 server with the rules as its
//!   `org.quickbus.Filter` named argument; list: `sandbox-differences.toml`.
//! - `quickbus_behind_xdg_dbus_proxy_answers_as_dbus_daemon`: the same proxy
//!   in front of quickbus-daemon; any difference is a quickbus or harness
//!   bug; list: `sandbox-proxy-differences.toml`.
//!
//! Environment: `QUICKBUS_REFERENCE_DAEMON` (default /usr/bin/dbus-daemon),
//! `QUICKBUS_DIFF_DAEMON` (default: the workspace's quickbus-daemon),
//! `QUICKBUS_XDG_DBUS_PROXY` (default /usr/bin/xdg-dbus-proxy),
//! `QUICKBUS_SANDBOX_SIDE` (run the first test against another side by its
//! name: proxy-on-quickbus, quickbus-container, proxy-on-dbus-daemon),
//! `QUICKBUS_DIFF_ONLY` (only cases whose name contains it; the list's
//! staleness checks are then skipped), `QUICKBUS_DIFF_SHOW` (print both
//! transcripts of every case).

use std::path::{Path, PathBuf};
use std::time::Instant;

use quickbus_differential::compare::{diff, in_parallel, print_transcript};
use quickbus_differential::differences;
use quickbus_differential::sandbox::side::XDG_DBUS_PROXY;
use quickbus_differential::sandbox::{self, cases, Programs, Side};

const WORKERS: usize = 4;
const MIN_CASES: usize = 60;

fn program(variable: &str, default: &str, package: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    assert!(
        path.is_file(),
        "no {} (install {package} or set {variable})",
        path.display()
    );
    path
}

fn programs() -> Programs {
    Programs {
        dbus_daemon: program(
            "QUICKBUS_REFERENCE_DAEMON",
            "/usr/bin/dbus-daemon",
            "dbus-daemon",
        ),
        quickbus_daemon: quickbus_differential::daemon::quickbus_daemon(),
        proxy: program("QUICKBUS_XDG_DBUS_PROXY", XDG_DBUS_PROXY, "xdg-dbus-proxy"),
    }
}

/// Runs every case on the reference and on `tested`, judges the
/// differences against the list in `list_file`.
fn compare_with_reference(tested: Side, list_file: &str) {
    let started = Instant::now();
    let reference = Side::ProxyOnDbusDaemon;
    let programs = programs();
    let only = std::env::var("QUICKBUS_DIFF_ONLY").ok();
    let show_all = std::env::var_os("QUICKBUS_DIFF_SHOW").is_some();
    let all: Vec<_> = cases::all()
        .into_iter()
        .filter(|c| !matches!(only.as_deref(), Some(o) if !c.name.contains(o)))
        .collect();
    let names: Vec<String> = all.iter().map(|c| c.name.clone()).collect();
    differences::assert_unique(&names);

    let differences = in_parallel(&all, WORKERS, |case| {
        let theirs = sandbox::run(case, reference, &programs);
        let ours = sandbox::run(case, tested, &programs);
        if show_all {
            print_transcript(&case.name, reference.name(), &theirs);
            print_transcript(&case.name, tested.name(), &ours);
        }
        diff(&theirs, &ours)
    });
    let results: Vec<(usize, Option<String>)> = differences.into_iter().enumerate().collect();

    let list_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(list_file);
    let list = differences::load(&list_path);
    let differing: Vec<String> = results
        .iter()
        .filter(|(_, d)| d.is_some())
        .map(|(i, _)| names[*i].clone())
        .collect();
    let verdict = differences::judge(&list, &names, &differing);
    for (index, difference) in &results {
        let Some(difference) = difference else {
            continue;
        };
        let name = &names[*index];
        let listed = verdict.listed.iter().any(|(n, _)| n == name);
        let label = if listed { "listed" } else { "UNLISTED" };
        println!(
            "{label} difference {name} (- {}, + {}):",
            reference.name(),
            tested.name()
        );
        print!("{difference}");
    }
    println!(
        "sandbox {} vs {}: {} cases in {:.1} s: {} identical, {} differ as listed, {} differ unlisted",
        reference.name(),
        tested.name(),
        names.len(),
        started.elapsed().as_secs_f64(),
        names.len() - differing.len(),
        verdict.listed.len(),
        verdict.unlisted.len(),
    );
    verdict.assert_holds(
        &list_path,
        "sandbox cases",
        reference.name(),
        only.is_none(),
    );
    if only.is_none() {
        assert!(names.len() >= MIN_CASES, "only {} cases", names.len());
    }
}

#[test]
fn the_container_filter_answers_as_xdg_dbus_proxy() {
    let side = match std::env::var("QUICKBUS_SANDBOX_SIDE") {
        Ok(name) => Side::from_name(&name).unwrap_or_else(|| panic!("no side {name:?}")),
        Err(_) => Side::QuickbusContainer,
    };
    compare_with_reference(side, "sandbox-differences.toml");
}

#[test]
fn quickbus_behind_xdg_dbus_proxy_answers_as_dbus_daemon() {
    compare_with_reference(Side::ProxyOnQuickbus, "sandbox-proxy-differences.toml");
}
