//! dbus-run-session starting the daemon under test, with a given
//! configuration file and with `--session`.

use std::process::Command;

use quickbus_e2e::{daemon_path, run_bounded, write_config, Finished, Listen, TempDir};

/// A shell command that talks to the session bus and prints its address.
const CLIENT_SCRIPT: &str = "dbus-send --session --print-reply --dest=org.freedesktop.DBus \
     /org/freedesktop/DBus org.freedesktop.DBus.ListNames && \
     echo \"address=$DBUS_SESSION_BUS_ADDRESS\"";

fn run_session(extra_args: &[String], scratch: &TempDir) -> Finished {
    let mut cmd = Command::new("dbus-run-session");
    cmd.arg(format!("--dbus-daemon={}", daemon_path().display()))
        .args(extra_args)
        .args(["--", "sh", "-c", CLIENT_SCRIPT])
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env("XDG_RUNTIME_DIR", scratch.path())
        .env("TMPDIR", scratch.path());
    run_bounded(&mut cmd).success()
}

fn assert_talked_to_a_bus(out: &Finished) {
    assert!(
        out.stdout.contains(r#"string "org.freedesktop.DBus""#),
        "{out:#?}"
    );
    let address = out
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("address="))
        .unwrap_or_else(|| panic!("no address printed: {out:#?}"));
    quickbus_e2e::assert_guid_suffix(address);
}

#[test]
fn runs_a_client_against_the_daemon_with_a_config_file() {
    let scratch = TempDir::new();
    let config = write_config(scratch.path(), Listen::UnixPath);
    let out = run_session(&[format!("--config-file={}", config.display())], &scratch);
    assert_talked_to_a_bus(&out);
    assert!(
        out.stdout.contains(&format!(
            "address=unix:path={},",
            scratch.path().join("bus").display()
        )),
        "{out:#?}"
    );
}

#[test]
fn runs_a_client_against_the_daemon_with_its_session_configuration() {
    // Without --config-file, dbus-run-session passes --session: the system's
    // session.conf, or quickbus's built-in one when that file is absent.
    let scratch = TempDir::new();
    let out = run_session(&[], &scratch);
    assert_talked_to_a_bus(&out);
}
