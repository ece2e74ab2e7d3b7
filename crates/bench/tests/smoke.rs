//! A short run of `quickbus-bench` against quickbus-daemon and dbus-daemon:
//! every workload reports a row for every bus with everything received.
//! No timing is checked. Needs /usr/bin/dbus-daemon; quickbus-daemon is built by
//! quickbus-e2e's `quickbus_daemon_path`.

mod support;

use std::time::Duration;

use support::{against_quickbus, run_bench};

#[test]
fn quick_bench_reports_every_workload_fully_received() {
    let json =
        std::env::temp_dir().join(format!("quickbus-bench-smoke-{}.json", std::process::id()));
    let mut args = against_quickbus(&[
        "--quick",
        "--count",
        "20",
        "--buses",
        "quickbus,dbus-daemon",
    ]);
    args.extend(["--json".into(), json.clone().into()]);
    let output = run_bench(args, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("skipped"), "{stdout}");

    let mut rows = 0;
    for workload in ["signal-burst", "fan-out", "round-trip"] {
        for subject in ["quickbus", "dbus-daemon"] {
            let matching: Vec<&str> = stdout
                .lines()
                .filter(|l| l.starts_with(workload) && l.contains(&format!(" {subject} ")))
                .collect();
            assert!(
                !matching.is_empty(),
                "no {workload} row for {subject}:\n{stdout}"
            );
            for line in matching {
                assert!(line.contains("100.0%"), "not all received: {line}");
                assert!(line.trim_end().ends_with(" -"), "errors reported: {line}");
                rows += 1;
            }
        }
    }
    for floor in ["peer-to-peer", "bare-socket"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("round-trip") && l.contains(floor)),
            "no {floor} row:\n{stdout}"
        );
    }
    assert!(stdout.contains("qb/daemon"), "no ratio rows:\n{stdout}");
    // The hostile and draining neighbours: a row per bus, every round
    // trip answered and every connection made (no error), and quickbus
    // told the receivers of everything they lost.
    for workload in ["hostile-neighbour", "draining-neighbours"] {
        for subject in ["quickbus", "dbus-daemon"] {
            let row = stdout
                .lines()
                .find(|l| l.starts_with(workload) && l.contains(&format!(" {subject} ")))
                .unwrap_or_else(|| panic!("no {workload} row for {subject}:\n{stdout}"));
            assert!(row.trim_end().ends_with(" -"), "errors reported: {row}");
        }
    }

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written")).unwrap();
    let _ = std::fs::remove_file(&json);
    let results = report["results"].as_array().expect("results array");
    // JSON holds the bus rows plus the two round-trip floors per size.
    assert!(results.len() > rows, "{report}");
    for row in results {
        assert_eq!(row["median"]["received_percent"], 100.0, "{row}");
    }
    let quickbus = report["hostile_neighbour"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["bus"] == "quickbus"))
        .unwrap_or_else(|| panic!("no hostile_neighbour JSON for quickbus: {report}"));
    assert!(quickbus["round_trips"].as_u64() > Some(0), "{quickbus}");
    assert_eq!(quickbus["lost_silently"], 0, "{quickbus}");
    let quickbus = report["draining_neighbours"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["bus"] == "quickbus"))
        .unwrap_or_else(|| panic!("no draining_neighbours JSON for quickbus: {report}"));
    assert!(quickbus["connects"].as_u64() > Some(0), "{quickbus}");
    assert_eq!(quickbus["lost_silently"], 0, "{quickbus}");
    assert_eq!(quickbus["receivers_cut_off"], 0, "{quickbus}");
}

#[test]
fn quick_storm_reports_every_bus_at_every_flood_rate_with_every_call_answered() {
    let args = against_quickbus(&[
        "--quick",
        "--count",
        "20",
        "--only",
        "storm",
        "--buses",
        "quickbus,dbus-daemon",
    ]);
    let output = run_bench(args, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("skipped"), "{stdout}");
    for flood in ["max ", "10000/s "] {
        for subject in ["quickbus", "dbus-daemon"] {
            let row = stdout
                .lines()
                .find(|l| l.starts_with(flood) && l.contains(&format!(" {subject} ")))
                .unwrap_or_else(|| panic!("no storm row for {subject} at {flood}:\n{stdout}"));
            assert!(row.contains(" 20/20 "), "calls unanswered: {row}");
            assert!(row.trim_end().ends_with(" -"), "errors reported: {row}");
        }
    }
    assert!(stdout.contains("qb/daemon"), "no ratio rows:\n{stdout}");
}

/// `--quickbus-threads` reaches the generic workloads too, as its help
/// says: quickbus with 2 threads gets rows of its own, fully received,
/// and ratio rows against the other bus.
#[test]
fn quickbus_threads_give_the_generic_workloads_rows_of_their_own() {
    let args = against_quickbus(&[
        "--only",
        "fan-out,round-trip",
        "--quick",
        "--count",
        "20",
        "--buses",
        "quickbus,dbus-daemon",
        "--quickbus-threads",
        "2",
    ]);
    let output = run_bench(args, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for workload in ["fan-out", "round-trip"] {
        let rows: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with(workload) && l.contains(" qb t2 "))
            .collect();
        assert!(!rows.is_empty(), "no {workload} row for qb t2:\n{stdout}");
        for row in rows {
            assert!(row.contains("100.0%"), "not all received: {row}");
            assert!(row.trim_end().ends_with(" -"), "errors reported: {row}");
        }
    }
    assert!(
        stdout.contains("t2/daemon"),
        "no ratio rows for qb t2:\n{stdout}"
    );
}
