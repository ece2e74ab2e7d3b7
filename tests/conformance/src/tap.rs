//! Reading a subtest's verdict from its TAP output (GLib test binaries and
//! the suite's shell scripts both print TAP with `--tap`).

/// What one subtest came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    /// Skipped, with the reason the test gave.
    Skip(String),
    /// Failed, with the first line that says why.
    Fail(String),
}

/// The verdict on test `path` (a GLib test path, e.g. `/limits/foo`, or
/// for a script the test number as text), from its exit status and output.
/// A test passes only if it exited 0 *and* printed `ok N path`.
pub fn verdict(path: &str, exited_ok: bool, output: &str) -> Outcome {
    let line = output.lines().find(|line| names_test(line, path));
    match line {
        Some(line) if exited_ok && line.starts_with("ok ") => match line.split_once("# SKIP") {
            Some((_, reason)) => Outcome::Skip(reason.trim().to_owned()),
            None => Outcome::Pass,
        },
        _ => Outcome::Fail(failure_reason(output).unwrap_or_else(|| {
            if exited_ok {
                format!("no `ok` line for {path}")
            } else {
                "exited with an error".to_owned()
            }
        })),
    }
}

/// Whether `line` is the TAP result line (`ok`/`not ok`, a number, then
/// the name) of test `path`.
fn names_test(line: &str, path: &str) -> bool {
    let rest = line
        .strip_prefix("ok ")
        .or_else(|| line.strip_prefix("not ok "));
    let Some(rest) = rest else {
        return false;
    };
    let Some((_number, name)) = rest.split_once(' ') else {
        // `ok 3` with no name: a script test named by its number.
        return rest == path;
    };
    let name = name.strip_prefix("- ").unwrap_or(name);
    let name = name.split(" # ").next().unwrap_or(name).trim_end();
    name == path || rest.split(' ').next() == Some(path)
}

/// The first line of `output` that explains a failure (GLib's `ERROR:` or
/// `Bail out!`), shortened.
pub fn failure_reason(output: &str) -> Option<String> {
    let line = output.lines().find(|line| {
        line.starts_with("Bail out!") || line.starts_with("ERROR:") || line.contains("ERROR **")
    })?;
    let line = line.strip_prefix("Bail out! ").unwrap_or(line);
    Some(shorten(line, 200))
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The subtests a TAP plan announces (`1..N`), or None without a plan.
/// `1..0 # SKIP reason` yields Some(0).
pub fn plan(output: &str) -> Option<usize> {
    output.lines().find_map(|line| {
        let count = line.strip_prefix("1..")?;
        count.split_whitespace().next()?.parse().ok()
    })
}

/// The reason of a whole-file skip (`1..0 # SKIP reason`).
pub fn skipped_plan(output: &str) -> Option<String> {
    output.lines().find_map(|line| {
        let reason = line
            .strip_prefix("1..0")?
            .trim_start()
            .strip_prefix("# SKIP")?;
        Some(reason.trim().trim_start_matches('-').trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ok_line_with_a_zero_exit_passes() {
        let out = "# random seed: R02S\n1..1\nok 1 /limits/max-replies\n";
        assert_eq!(verdict("/limits/max-replies", true, out), Outcome::Pass);
    }

    #[test]
    fn an_ok_line_with_a_failed_exit_fails() {
        let out = "1..1\nok 1 /a/b\n";
        assert!(matches!(verdict("/a/b", false, out), Outcome::Fail(_)));
    }

    #[test]
    fn a_missing_ok_line_fails_even_with_a_zero_exit() {
        let out = "1..1\n";
        assert_eq!(
            verdict("/a/b", true, out),
            Outcome::Fail("no `ok` line for /a/b".into())
        );
    }

    #[test]
    fn an_ok_line_for_another_path_does_not_count() {
        let out = "1..1\nok 1 /a/bc\n";
        assert!(matches!(verdict("/a/b", true, out), Outcome::Fail(_)));
    }

    #[test]
    fn skips_keep_their_reason() {
        let out = "ok 1 /fd-limit/session # SKIP Cannot test, no rlimit\n";
        assert_eq!(
            verdict("/fd-limit/session", true, out),
            Outcome::Skip("Cannot test, no rlimit".into())
        );
    }

    #[test]
    fn failures_report_the_glib_error_line() {
        let out = "1..1\n**\nERROR:../test/dbus-daemon.c:42:check: assertion failed\n\
                   Bail out! ERROR:../test/dbus-daemon.c:42:check: assertion failed\n";
        assert_eq!(
            verdict("/a", false, out),
            Outcome::Fail("ERROR:../test/dbus-daemon.c:42:check: assertion failed".into())
        );
    }

    #[test]
    fn script_tests_are_named_by_number_or_description() {
        let out = "1..3\nok 1 - dbus-daemon --fork\nnot ok 2 - dbus-send\nok 3\n";
        assert_eq!(verdict("1", true, out), Outcome::Pass);
        assert!(matches!(verdict("2", true, out), Outcome::Fail(_)));
        assert_eq!(verdict("3", true, out), Outcome::Pass);
    }

    #[test]
    fn plans_and_whole_file_skips_are_read() {
        assert_eq!(plan("# x\n1..3\nok 1\n"), Some(3));
        assert_eq!(plan("ok 1\n"), None);
        let skipped = "1..0 # SKIP - mktemp -d doesn't work\n";
        assert_eq!(plan(skipped), Some(0));
        assert_eq!(
            skipped_plan(skipped).as_deref(),
            Some("mktemp -d doesn't work")
        );
    }

    #[test]
    fn long_reasons_are_shortened() {
        let long = format!("ERROR:{}", "x".repeat(500));
        let reason = failure_reason(&long).unwrap();
        assert_eq!(reason.chars().count(), 201);
    }
}
