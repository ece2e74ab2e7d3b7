//! `--containers-build BUILD`: dbus's test-containers from a dbus build
//! with Containers1 re-enabled (scripts/build-dbus-containers.sh), run first
//! against that build's own dbus-daemon (the reference) and then against
//! the daemon under test. The daemon under test must pass every subtest
//! the reference passed; a skip, on either daemon, is a failure (Debian's
//! test-containers, built without the feature, "passes" by skipping 15 of
//! its 17 subtests, which is what this mode exists to avoid).
//!
//! Nothing here needs a copy of the daemons in a shared directory (as the
//! installed suites do, see shared.rs): test-containers starts the bus as
//! the user running it, and the one thing it does as another user
//! (/containers/wrong-uid, and the attacker of /containers/stop-server/*,
//! switch the test's own effective uid to `nobody` for a moment) is to
//! connect to sockets, in /tmp and in /run/dbus/containers. So the build
//! and the daemon may live under /root (mode 0700); the sockets' directories
//! must be reachable, which socket_directory() sees to for the one it owns.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::tap::Outcome;

/// The test program, in BUILD/test.
pub const PROGRAM: &str = "test-containers";

/// The variable the patched /containers/get-supported-arguments reads the
/// expected SupportedArguments from (comma separated; unset: none).
pub const SUPPORTED_ARGUMENTS_VAR: &str = "DBUS_TEST_CONTAINERS_SUPPORTED_ARGUMENTS";

/// Where dbus-daemon run as root creates container sockets. Upstream
/// relies on its tmpfiles.d entry (`d /run/dbus/containers 0755`) to make
/// it; a test machine may not have it.
pub const ROOT_SOCKET_DIRECTORY: &str = "/run/dbus/containers";

/// The parts of a build the mode uses.
#[derive(Debug, Clone)]
pub struct Build {
    /// BUILD/test: DBUS_TEST_EXEC, with DBUS_TEST_DATA in its data/.
    pub tests: PathBuf,
    /// BUILD/bus/dbus-daemon, the reference.
    pub reference: PathBuf,
}

impl Build {
    /// Checks that `dir` holds a finished build.
    pub fn at(dir: &Path) -> Result<Build, String> {
        let build = Build {
            tests: dir.join("test"),
            reference: dir.join("bus").join("dbus-daemon"),
        };
        for needed in [&build.tests.join(PROGRAM), &build.reference] {
            if !needed.is_file() {
                return Err(format!(
                    "{} is missing: build dbus with scripts/build-dbus-containers.sh \
                     and pass the directory it prints",
                    needed.display()
                ));
            }
        }
        Ok(build)
    }
}

/// As root, makes sure [`ROOT_SOCKET_DIRECTORY`] exists, readable by every
/// user as upstream's tmpfiles.d makes it (the wrong-uid subtest connects
/// as `nobody` to a socket in it). Returns a line saying what was done.
pub fn socket_directory(is_root: bool) -> Result<Option<String>, String> {
    socket_directory_at(Path::new(ROOT_SOCKET_DIRECTORY), is_root)
}

fn socket_directory_at(dir: &Path, is_root: bool) -> Result<Option<String>, String> {
    if !is_root {
        return Ok(Some(
            "not root: the bus puts container sockets in its runtime directory, \
             and the subtests that switch uid skip (a failure here)"
                .to_owned(),
        ));
    }
    if dir.is_dir() {
        return Ok(None);
    }
    // Each missing level 0755 whatever the umask (a 0700 /run/dbus would
    // keep `nobody` out as surely as a 0700 containers directory).
    let mut missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    missing.reverse();
    for level in missing {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(level)
            .and_then(|()| std::fs::set_permissions(level, std::fs::Permissions::from_mode(0o755)))
            .map_err(|e| format!("creating {}: {e}", level.display()))?;
    }
    Ok(Some(format!(
        "created {} (mode 0755): as root, Containers1 puts its sockets there, \
         and this machine had no such directory",
        dir.display()
    )))
}

/// A subtest the daemon under test fell short on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub subtest: String,
    pub why: String,
}

/// What the daemon under test must still do: every subtest the reference
/// passed must pass, and nothing may be skipped, by either daemon (a skip
/// by the reference means this machine cannot run the subtest, so it
/// proves nothing about either). A subtest the reference failed is not
/// required of the daemon under test.
pub fn shortfalls(reference: &[(String, Outcome)], tested: &[(String, Outcome)]) -> Vec<Shortfall> {
    let mut missing = Vec::new();
    for (subtest, expected) in reference {
        let got = tested.iter().find(|(name, _)| name == subtest);
        let why = match (expected, got.map(|(_, outcome)| outcome)) {
            (Outcome::Skip(reason), _) => Some(format!("skipped by the reference ({reason})")),
            (_, Some(Outcome::Skip(reason))) => Some(format!("skipped ({reason})")),
            // Its FAIL line above says why.
            (Outcome::Pass, Some(Outcome::Fail(_))) => Some("failed".to_owned()),
            (Outcome::Pass, None) => Some("not run".to_owned()),
            (Outcome::Pass, Some(Outcome::Pass)) | (Outcome::Fail(_), _) => None,
        };
        if let Some(why) = why {
            missing.push(Shortfall {
                subtest: subtest.clone(),
                why,
            });
        }
    }
    for (subtest, outcome) in tested {
        let known = reference.iter().any(|(name, _)| name == subtest);
        if let (false, Outcome::Skip(reason)) = (known, outcome) {
            missing.push(Shortfall {
                subtest: subtest.clone(),
                why: format!("skipped ({reason})"),
            });
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(outcomes: &[(&str, Outcome)]) -> Vec<(String, Outcome)> {
        outcomes
            .iter()
            .map(|(name, outcome)| (name.to_string(), outcome.clone()))
            .collect()
    }

    #[test]
    fn every_subtest_the_reference_passed_must_pass() {
        let reference = run(&[("/a", Outcome::Pass), ("/b", Outcome::Pass)]);
        let tested = run(&[("/a", Outcome::Pass), ("/b", Outcome::Fail("boom".into()))]);
        assert_eq!(
            shortfalls(&reference, &tested),
            vec![Shortfall {
                subtest: "/b".into(),
                why: "failed".into()
            }]
        );
        assert!(shortfalls(&reference, &reference).is_empty());
    }

    #[test]
    fn a_skip_on_either_daemon_is_a_shortfall() {
        let reference = run(&[
            ("/a", Outcome::Skip("not root".into())),
            ("/b", Outcome::Pass),
        ]);
        let tested = run(&[("/a", Outcome::Pass), ("/b", Outcome::Skip("no".into()))]);
        let whys: Vec<String> = shortfalls(&reference, &tested)
            .into_iter()
            .map(|s| format!("{} {}", s.subtest, s.why))
            .collect();
        assert_eq!(
            whys,
            ["/a skipped by the reference (not root)", "/b skipped (no)"]
        );
    }

    #[test]
    fn what_the_reference_failed_is_not_required() {
        let reference = run(&[("/a", Outcome::Fail("flaky".into()))]);
        let tested = run(&[("/a", Outcome::Fail("same".into()))]);
        assert!(shortfalls(&reference, &tested).is_empty());
    }

    #[test]
    fn a_missing_socket_directory_is_made_open_to_every_user_and_said() {
        let parent =
            std::env::temp_dir().join(format!("qb-socket-directory-{}", std::process::id()));
        let dir = parent.join("dbus").join("containers");
        let note = socket_directory_at(&dir, true).unwrap().expect("a note");
        assert!(
            note.starts_with(&format!("created {}", dir.display())),
            "{note}"
        );
        for made in [&dir, &dir.parent().unwrap().to_path_buf()] {
            let mode = std::fs::metadata(made).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o755, "{} is {mode:o}", made.display());
        }
        assert_eq!(socket_directory_at(&dir, true).unwrap(), None);
        std::fs::remove_dir_all(&parent).unwrap();
        assert!(socket_directory_at(&dir, false)
            .unwrap()
            .unwrap()
            .starts_with("not root"));
        assert!(!dir.exists(), "made as non-root");
    }

    #[test]
    fn a_subtest_missing_from_the_run_is_a_shortfall() {
        let reference = run(&[("/a", Outcome::Pass)]);
        assert_eq!(shortfalls(&reference, &[])[0].why, "not run");
    }
}
