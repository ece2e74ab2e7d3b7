//! Which tests exist: the bus-facing programs of Debian's dbus-tests and
//! the subtests each one lists. (test-corrupt, test-relay, test-fdpass and
//! test-loopback exercise libdbus alone and never start a bus; their
//! scenarios live in tests/e2e/tests/libdbus_scenarios.rs instead.
//! Debian's test-containers is built without Containers1: 15 of its 17
//! subtests skip and 2 assert that the bus has no such interface, which
//! quickbus has; the copy built with the feature runs instead, against
//! the reference and the daemon under test (`--containers-build`,
//! containers.rs).)

use std::path::Path;

use crate::run::{output_of, Environment};
use crate::tap;

/// The programs that start the daemon under test, in the order run.
pub const BUS_PROGRAMS: &[&str] = &[
    "test-dbus-daemon",
    "test-dbus-daemon-eavesdrop",
    "test-monitor",
    "test-header-fields",
    "test-sd-activation",
    "test-uid-permissions",
    "test-dbus-daemon-fork.sh",
];

/// One runnable unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subtest {
    pub program: String,
    /// A GLib test path (`/limits/foo`), run alone with `-p`; or for a TAP
    /// script, the test number within the script's one run.
    pub path: String,
}

impl Subtest {
    pub fn is_script(&self) -> bool {
        self.program.ends_with(".sh")
    }

    pub fn name(&self) -> String {
        if self.is_script() {
            format!("{} #{}", self.program, self.path)
        } else {
            format!("{} {}", self.program, self.path)
        }
    }
}

/// The GLib test paths `program -l` prints.
pub fn glib_paths(listing: &str) -> Vec<String> {
    let mut paths: Vec<String> = listing
        .lines()
        .filter(|line| line.starts_with('/'))
        .map(|line| line.trim_end().to_owned())
        .collect();
    paths.dedup();
    paths
}

/// Subtests of `program` (GLib binaries list theirs; a script is listed
/// as a single entry, path "*", and split by its TAP plan once run).
pub fn subtests_of(env: &Environment, program: &str) -> std::io::Result<Vec<Subtest>> {
    let path = env.tests.join(program);
    if program.ends_with(".sh") {
        return Ok(vec![Subtest {
            program: program.to_owned(),
            path: "*".to_owned(),
        }]);
    }
    let listing = output_of(env, &path, &["-l"])?;
    Ok(glib_paths(&listing)
        .into_iter()
        .map(|path| Subtest {
            program: program.to_owned(),
            path,
        })
        .collect())
}

/// The numbers of a script's tests, from its output's plan (at least one,
/// so a script that died before its plan still counts as a failure).
pub fn script_numbers(output: &str) -> Vec<String> {
    let count = tap::plan(output).unwrap_or(1).max(1);
    (1..=count).map(|n| n.to_string()).collect()
}

pub fn installed(tests: &Path, program: &str) -> bool {
    tests.join(program).is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_keep_only_test_paths_once() {
        let listing = "# random seed: R02S\n1..3\n# Start of a tests\n/a/one\n/a/one\n/b\n";
        assert_eq!(glib_paths(listing), vec!["/a/one", "/b"]);
    }

    #[test]
    fn scripts_are_named_by_number() {
        let t = Subtest {
            program: "test-dbus-daemon-fork.sh".into(),
            path: "2".into(),
        };
        assert_eq!(t.name(), "test-dbus-daemon-fork.sh #2");
        assert_eq!(script_numbers("1..3\nok 1\n"), vec!["1", "2", "3"]);
        assert_eq!(script_numbers("garbage"), vec!["1"]);
    }
}
