//! A tiny run of `quickbus-bench --only many-clients` against quickbus-daemon
//! and dbus-daemon: a row for every K on every bus and peer to peer, with
//! round trips made and no errors, and a fan-out row per bus with every
//! signal delivered; and with `--quickbus-threads`, a row of its own for
//! quickbus with each number of threads, whose daemon does run that pool.
//! No timing is checked. Needs /usr/bin/dbus-daemon; quickbus-daemon is
//! built by quickbus-e2e's `quickbus_daemon_path`.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{against_quickbus, run_bench};

/// A quick many-clients run with `args` added (20 fan-out signals): its
/// table, no bus skipped, and its JSON's many-clients part. `name` keeps
/// the JSON file apart from the other test's.
fn run_many_clients(name: &str, args: &[&str]) -> (String, Value) {
    let json =
        std::env::temp_dir().join(format!("quickbus-bench-{name}-{}.json", std::process::id()));
    let mut all = vec!["--only", "many-clients", "--quick", "--count", "20"];
    all.extend_from_slice(args);
    let mut all = against_quickbus(&all);
    all.extend(["--json".into(), json.clone().into()]);
    let output = run_bench(all, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!stdout.contains("skipped"), "{stdout}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written")).unwrap();
    let _ = std::fs::remove_file(&json);
    (stdout, report["many_clients"].clone())
}

/// The table's row that starts with `start` (K or receivers) for
/// `subject`.
fn row<'a>(stdout: &'a str, start: &str, subject: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(start) && l.contains(&format!(" {subject} ")))
        .unwrap_or_else(|| panic!("no {start}row for {subject}:\n{stdout}"))
}

#[test]
fn a_tiny_many_clients_run_reports_every_k_and_the_fan_out_fully() {
    let (stdout, many) = run_many_clients(
        "many-clients",
        &[
            "--clients",
            "1,3",
            "--wide-fan-out",
            "4",
            "--buses",
            "quickbus,dbus-daemon",
        ],
    );
    let row = |start: &str, subject: &str| row(&stdout, start, subject);
    for k in ["1 ", "3 "] {
        for subject in ["quickbus", "dbus-daemon", "peer-to-peer"] {
            let row = row(k, subject);
            assert!(row.trim_end().ends_with(" -"), "errors reported: {row}");
        }
    }
    let fan_out = row("4 ", "quickbus");
    assert!(fan_out.contains("100.0%"), "not all delivered: {fan_out}");
    assert!(stdout.contains("qb/daemon"), "no ratio rows:\n{stdout}");

    let pairs = many["pairs"].as_array().expect("pairs rows");
    // Two K, each on two buses and peer to peer.
    assert_eq!(pairs.len(), 6, "{many}");
    for row in pairs {
        let sample = &row["samples"][0];
        assert!(sample["round_trips"].as_u64() > Some(0), "{row}");
        assert_eq!(sample["errors"], serde_json::json!([]), "{row}");
        if row["subject"] == "peer-to-peer" {
            assert!(sample["bus_cpu_seconds"].is_null(), "{row}");
        } else {
            assert!(sample["bus_cpu_seconds"].as_f64() > Some(0.0), "{row}");
        }
        assert_loop_cpu_of_quickbus_only(row, &row["subject"]);
    }
    let fan_outs = many["fan_out"].as_array().expect("fan-out rows");
    assert_eq!(fan_outs.len(), 2, "{many}");
    for row in fan_outs {
        assert_eq!(row["receivers"], 4, "{row}");
        let sample = &row["samples"][0];
        assert_eq!(sample["expected"], 80, "{row}");
        assert_eq!(sample["delivered"], 80, "{row}");
        assert!(sample["bus_cpu_seconds"].as_f64() > Some(0.0), "{row}");
        // The CPU is read once every receiver is done, over a wall time
        // of its own: from before the first send to that read, so never
        // shorter than first send to last receive (`seconds`).
        let cpu_wall = sample["cpu_wall_seconds"].as_f64().expect("the CPU's wall");
        let seconds = sample["seconds"].as_f64().expect("seconds");
        assert!(cpu_wall >= seconds && seconds > 0.0, "{row}");
        assert_loop_cpu_of_quickbus_only(row, &row["bus"]);
    }
}

/// quickbus's loop thread is measured on its own, a part of the bus's
/// CPU; the other buses have none (dbus-broker's main thread is its
/// launcher's; dbus-daemon's one thread is its whole bus CPU).
fn assert_loop_cpu_of_quickbus_only(row: &Value, subject: &Value) {
    let sample = &row["samples"][0];
    let loop_cpu = sample["loop_cpu_seconds"].as_f64();
    if subject == "quickbus" {
        let bus_cpu = sample["bus_cpu_seconds"].as_f64().expect("the bus's CPU");
        // Both are nanosecond counts turned into seconds, the bus's from a
        // larger total: when the loop was the only thread that ran, the
        // two differ only by the rounding of that subtraction.
        const ONE_NS: f64 = 1e-9;
        assert!(
            loop_cpu > Some(0.0) && loop_cpu <= Some(bus_cpu + ONE_NS),
            "{row}"
        );
        assert!(row["median"]["loop_cores"].as_f64() > Some(0.0), "{row}");
    } else {
        assert_eq!(loop_cpu, None, "{row}");
    }
}

#[test]
fn quickbus_threads_add_a_row_per_thread_count_beside_the_plain_quickbus() {
    let (stdout, many) = run_many_clients(
        "many-clients-threads",
        &[
            "--clients",
            "1,2",
            "--wide-fan-out",
            "3",
            "--buses",
            "quickbus",
            "--quickbus-threads",
            "1,2",
        ],
    );
    let row = |start: &str, subject: &str| row(&stdout, start, subject);
    for k in ["1 ", "2 "] {
        for subject in ["quickbus", "qb t1", "qb t2", "peer-to-peer"] {
            let row = row(k, subject);
            assert!(row.trim_end().ends_with(" -"), "errors reported: {row}");
        }
    }
    for subject in ["quickbus", "qb t1", "qb t2"] {
        let fan_out = row("3 ", subject);
        assert!(fan_out.contains("100.0%"), "not all delivered: {fan_out}");
    }

    // Two K, each on three quickbus configurations and peer to peer.
    let pairs = many["pairs"].as_array().expect("pairs rows");
    assert_eq!(pairs.len(), 8, "{many}");
    let threads_of = |subject: &str| -> Vec<u64> {
        pairs
            .iter()
            .filter(|row| row["subject"] == subject)
            .map(|row| {
                let sample = &row["samples"][0];
                assert!(sample["round_trips"].as_u64() > Some(0), "{row}");
                assert!(sample["bus_cpu_seconds"].as_f64() > Some(0.0), "{row}");
                sample["bus_threads"].as_u64().expect("the bus's threads")
            })
            .collect()
    };
    for row in pairs.iter().filter(|row| row["subject"] == "qb t2") {
        assert_eq!(row["quickbus_threads"], 2, "{row}");
    }
    // The limit took effect: the pool of 2 runs beside the loop's thread,
    // and one thread starts no pool.
    let (one, two) = (threads_of("qb t1"), threads_of("qb t2"));
    assert_eq!(one.len(), 2, "{many}");
    for (one, two) in one.iter().zip(&two) {
        assert!(*two >= one + 2, "threads: t1 {one}, t2 {two}");
    }
    let fan_outs = many["fan_out"].as_array().expect("fan-out rows");
    let marked: Vec<_> = fan_outs
        .iter()
        .filter_map(|row| row.get("quickbus_threads"))
        .collect();
    assert_eq!(marked, [1, 2], "{many}");
}
