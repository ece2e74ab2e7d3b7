//! A tiny run of `quickbus-bench --only sandbox`: the app's calls and the
//! service's signals on every way, all answered and received. No timing is
//! checked. Needs /usr/bin/xdg-dbus-proxy (scripts/test.sh installs it);
//! dbus-broker is left out (`--buses quickbus`), so the proxy is measured in
//! front of quickbus. The container way needs quickbus's Containers1 with
//! the org.quickbus.Filter named argument (issue 26).

mod support;

use std::time::Duration;

use support::{against_quickbus, run_bench};

#[test]
fn a_tiny_sandbox_run_reports_every_way_fully_received() {
    let json = std::env::temp_dir().join(format!(
        "quickbus-bench-sandbox-{}.json",
        std::process::id()
    ));
    let mut args = against_quickbus(&[
        "--only", "sandbox", "--quick", "--count", "20", "--buses", "quickbus",
    ]);
    args.extend(["--json".into(), json.clone().into()]);
    let output = run_bench(args, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("proxy-broker"),
        "dbus-broker was not asked for:\n{stdout}"
    );
    for measure in ["calls", "signals"] {
        for way in ["proxy-qb", "container", "unfiltered", "plain"] {
            let row = stdout
                .lines()
                .find(|l| l.starts_with(measure) && l.contains(&format!(" {way} ")))
                .unwrap_or_else(|| panic!("no {measure} row for {way}:\n{stdout}"));
            assert!(row.contains("100.0%"), "not all received: {row}");
            assert!(row.trim_end().ends_with(" -"), "errors reported: {row}");
        }
        assert!(
            stdout
                .lines()
                .any(|l| l.contains("container/proxy") || l.contains("container/plain")),
            "no ratio rows:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("== issue 26 targets"),
        "no targets section:\n{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written")).unwrap();
    let _ = std::fs::remove_file(&json);
    let rows = report["sandbox"]["results"]
        .as_array()
        .expect("sandbox rows");
    assert_eq!(rows.len(), 8, "{report}");
    for row in rows {
        assert_eq!(row["median"]["received_percent"], 100.0, "{row}");
    }
}
