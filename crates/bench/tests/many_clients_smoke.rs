//! A tiny run of `quickbus-bench --only many-clients` against quickbus-daemon
//! and dbus-daemon: a row for every K on every bus and peer to peer, with
//! round trips made and no errors, and a fan-out row per bus with every
//! signal delivered. No timing is checked. Needs /usr/bin/dbus-daemon;
//! quickbus-daemon is built by quickbus-e2e's `quickbus_daemon_path`.

mod support;

use std::time::Duration;

use support::{against_quickbus, run_bench};

#[test]
fn a_tiny_many_clients_run_reports_every_k_and_the_fan_out_fully() {
    let json = std::env::temp_dir().join(format!(
        "quickbus-bench-many-clients-{}.json",
        std::process::id()
    ));
    let mut args = against_quickbus(&[
        "--only",
        "many-clients",
        "--quick",
        "--clients",
        "1,3",
        "--wide-fan-out",
        "4",
        "--count",
        "20",
        "--buses",
        "quickbus,dbus-daemon",
    ]);
    args.extend(["--json".into(), json.clone().into()]);
    let output = run_bench(args, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("skipped"), "{stdout}");
    let row = |start: &str, subject: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(start) && l.contains(&format!(" {subject} ")))
            .unwrap_or_else(|| panic!("no {start}row for {subject}:\n{stdout}"))
    };
    for k in ["1 ", "3 "] {
        for subject in ["quickbus", "dbus-daemon", "peer-to-peer"] {
            let row = row(k, subject);
            assert!(row.trim_end().ends_with(" -"), "errors reported: {row}");
        }
    }
    let fan_out = row("4 ", "quickbus");
    assert!(fan_out.contains("100.0%"), "not all delivered: {fan_out}");
    assert!(stdout.contains("qb/daemon"), "no ratio rows:\n{stdout}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written")).unwrap();
    let _ = std::fs::remove_file(&json);
    let many = &report["many_clients"];
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
    }
    let fan_outs = many["fan_out"].as_array().expect("fan-out rows");
    assert_eq!(fan_outs.len(), 2, "{many}");
    for row in fan_outs {
        assert_eq!(row["receivers"], 4, "{row}");
        let sample = &row["samples"][0];
        assert_eq!(sample["expected"], 80, "{row}");
        assert_eq!(sample["delivered"], 80, "{row}");
        assert!(sample["bus_cpu_seconds"].as_f64() > Some(0.0), "{row}");
    }
}
