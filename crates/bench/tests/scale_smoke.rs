//! A tiny run of `quickbus-bench scale` against quickbus-daemon and
//! dbus-daemon: every phase fills every block on both buses, reports its
//! ratios, and writes JSON and charts. No timing is checked. Needs
//! /usr/bin/dbus-daemon; quickbus-daemon is built by quickbus-e2e's
//! `quickbus_daemon_path`.

mod support;

use std::time::Duration;

use support::{against_quickbus, run_bench};

const PHASES: [&str; 4] = ["names", "rules", "connections", "pending"];
const BUSES: [&str; 2] = ["quickbus", "dbus-daemon"];

#[test]
fn quick_scale_run_fills_every_phase_on_both_buses() {
    let dir = std::env::temp_dir().join(format!("quickbus-scale-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("scale.json");
    let plots = dir.join("plots");
    let mut args = against_quickbus(&[
        "scale",
        "--quick",
        "--names",
        "300",
        "--rules",
        "300",
        "--connections",
        "40",
        "--pending",
        "300",
        "--probe-reps",
        "3",
        "--buses",
        "quickbus,dbus-daemon",
    ]);
    args.extend(["--json".into(), json.clone().into()]);
    args.extend(["--plots".into(), plots.clone().into()]);
    let output = run_bench(args, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stdout.contains("FAILED"), "{stdout}\n{stderr}");
    assert!(!stdout.contains("skipped"), "{stdout}");
    for phase in PHASES {
        assert!(
            stdout.contains(&format!("{phase} flatness")),
            "no {phase} summary:\n{stdout}"
        );
    }

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written")).unwrap();
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), PHASES.len() * BUSES.len(), "{report}");
    for run in runs {
        assert!(run["error"].is_null(), "{run}");
        let points = run["points"].as_array().unwrap();
        // The empty bus, then 4 blocks, the last holding every item.
        assert_eq!(points.len(), 5, "{run}");
        assert_eq!(points[4]["size"], run["count"], "{run}");
        for point in points {
            assert_eq!(point["probes"].as_array().unwrap().len(), 5, "{point}");
            assert!(point["rss_bytes"].as_u64().unwrap() > 0, "{point}");
        }
        assert!(run["flatness"]["block_wall"].is_number(), "{run}");
    }
    for chart in ["names-block.svg", "rules-cpu.svg", "pending-call.svg"] {
        let svg = std::fs::read_to_string(plots.join(chart)).expect(chart);
        assert_eq!(svg.matches("<polyline").count(), BUSES.len(), "{chart}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
