//! One rule for tests that cannot run here: they fail, unless the person
//! running them said skips are fine (`QUICKBUS_ALLOW_SKIP=1`), and then
//! every skip is printed. A test that returns early must never pass
//! silently.
//!
//! ```
//! use quickbus_e2e::{can_change_user, skip};
//!
//! fn a_test_of_pacing_as_nobody() {
//!     if skip::quickbus_only("pacing") {
//!         return;
//!     }
//!     if skip::unless(can_change_user(), "needs root to run clients as other users") {
//!         return;
//!     }
//!     // ...
//! }
//! ```
//!
//! The reference run (`QUICKBUS_TEST_DAEMON=/usr/bin/dbus-daemon`) skips
//! every test of a promise only quickbus makes, so it must set
//! `QUICKBUS_ALLOW_SKIP=1`.

use std::ffi::OsStr;
use std::io::Write;

use crate::locate::{daemon_path, testing_quickbus};

/// The environment variable that turns "cannot run here" from a failure
/// into a printed skip; only the value `1` does.
pub const ALLOW_ENV: &str = "QUICKBUS_ALLOW_SKIP";

/// What a test that cannot run does, given the value of [`ALLOW_ENV`].
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Skipping is allowed: print this line to stderr and return.
    Skip(String),
    /// Skipping is not allowed: panic with this message.
    Fail(String),
}

/// The pure decision behind [`cannot_run`]: `allow` is the value of
/// [`ALLOW_ENV`] (if set), `test` the running test's name (if known).
pub fn verdict(allow: Option<&OsStr>, test: Option<&str>, reason: &str) -> Verdict {
    if allow == Some(OsStr::new("1")) {
        let line = match test {
            Some(test) => format!("SKIPPED: {test}: {reason}"),
            None => format!("SKIPPED: {reason}"),
        };
        Verdict::Skip(line)
    } else {
        Verdict::Fail(format!(
            "cannot run here: {reason} (set {ALLOW_ENV}=1 to allow skipping)"
        ))
    }
}

/// Reports that the calling test cannot run here. Panics unless
/// `QUICKBUS_ALLOW_SKIP=1`; then it prints `SKIPPED: <test>: <reason>` and
/// the caller must return.
#[track_caller]
pub fn cannot_run(reason: &str) {
    let allow = std::env::var_os(ALLOW_ENV);
    match verdict(allow.as_deref(), test_name().as_deref(), reason) {
        // Straight to the process's stderr: libtest captures eprintln! of
        // passing tests, and a skip must show in every run.
        Verdict::Skip(line) => {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        Verdict::Fail(message) => panic!("{message}"),
    }
}

/// `true` (the caller returns) when the test cannot run because `can_run`
/// is false, through [`cannot_run`]'s rule; `false` when it can run.
#[track_caller]
pub fn unless(can_run: bool, reason: &str) -> bool {
    if !can_run {
        cannot_run(reason);
    }
    !can_run
}

/// `true` (the caller returns) when the daemon under test is not quickbus:
/// `what` is a promise only quickbus makes, so the test cannot run against
/// the reference. Through [`cannot_run`]'s rule, so a reference run must
/// set `QUICKBUS_ALLOW_SKIP=1`.
#[track_caller]
pub fn quickbus_only(what: &str) -> bool {
    if testing_quickbus() {
        return false;
    }
    cannot_run(&format!(
        "{what} is quickbus's own promise, and the daemon under test is {}",
        daemon_path().display()
    ));
    true
}

/// The running test's name: libtest names each test's thread after it.
fn test_name() -> Option<String> {
    std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_skips_allowed_it_prints_the_test_and_the_reason() {
        assert_eq!(
            verdict(Some(OsStr::new("1")), Some("policy::rules"), "needs root"),
            Verdict::Skip("SKIPPED: policy::rules: needs root".to_owned())
        );
        assert_eq!(
            verdict(Some(OsStr::new("1")), None, "needs root"),
            Verdict::Skip("SKIPPED: needs root".to_owned())
        );
    }

    #[test]
    fn without_skips_allowed_it_fails_and_says_how_to_allow_them() {
        let expected = Verdict::Fail(
            "cannot run here: needs root (set QUICKBUS_ALLOW_SKIP=1 to allow skipping)".to_owned(),
        );
        for allow in [None, Some(""), Some("0"), Some("yes")] {
            assert_eq!(
                verdict(allow.map(OsStr::new), Some("policy::rules"), "needs root"),
                expected,
                "{allow:?}"
            );
        }
    }

    #[test]
    fn a_test_knows_its_own_name() {
        assert_eq!(
            test_name().as_deref(),
            Some("skip::tests::a_test_knows_its_own_name")
        );
    }

    /// Set in the child: the test is then the skipping test itself.
    const CHILD: &str = "QUICKBUS_SKIP_TEST_CHILD";

    /// The real `cannot_run`, in a child process running just this test
    /// (the environment is the child's own): with skips allowed the child
    /// passes and its stderr says SKIPPED even though libtest captures the
    /// test's output; without, it fails with the message.
    #[test]
    fn cannot_run_skips_visibly_or_fails_in_a_child_process() {
        const NAME: &str = "skip::tests::cannot_run_skips_visibly_or_fails_in_a_child_process";
        if std::env::var_os(CHILD).is_some() {
            cannot_run("probing");
            return;
        }
        let child = |allow: Option<&str>| {
            let mut command = std::process::Command::new(std::env::current_exe().unwrap());
            command.args(["--exact", NAME]).env(CHILD, "1");
            match allow {
                Some(value) => command.env(ALLOW_ENV, value),
                None => command.env_remove(ALLOW_ENV),
            };
            let out = command.output().expect("run the test binary");
            let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
            (out.status.success(), text(out.stdout), text(out.stderr))
        };

        let (passed, stdout, stderr) = child(Some("1"));
        assert!(passed, "{stdout}{stderr}");
        assert!(
            stderr.contains(&format!("SKIPPED: {NAME}: probing\n")),
            "{stderr}"
        );

        let (passed, stdout, stderr) = child(None);
        assert!(!passed, "{stdout}{stderr}");
        let message = "cannot run here: probing (set QUICKBUS_ALLOW_SKIP=1 to allow skipping)";
        assert!(
            stdout.contains(message) || stderr.contains(message),
            "{stdout}{stderr}"
        );
        assert!(!stderr.contains("SKIPPED"), "{stderr}");
    }

    #[test]
    fn a_test_that_can_run_is_not_skipped() {
        // Never reaches cannot_run, whatever the environment says.
        assert!(!unless(true, "never"));
    }
}
