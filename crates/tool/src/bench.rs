//! `quickbus bench ARGS...`: runs the benchmark lab, `quickbus-bench ARGS...`
//! (crates/bench), as `git` runs its subcommands. The lab is built from the
//! source tree and not packaged, so an installed `quickbus` says where it
//! comes from rather than failing obscurely.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use crate::Failure;

const PROGRAM: &str = "quickbus-bench";

/// Replace this process with quickbus-bench: the one next to this binary
/// (`target/release/quickbus bench` runs `target/release/quickbus-bench`),
/// else the one on `PATH`. Its output and exit status are the command's.
/// Returns only if it cannot be run.
pub fn run(args: &[OsString]) -> Failure {
    let program = beside_this_binary().unwrap_or_else(|| PathBuf::from(PROGRAM));
    let error = Command::new(&program).args(args).exec();
    if error.kind() == std::io::ErrorKind::NotFound {
        Failure(format!(
            "{PROGRAM} is not installed: the benchmark lab is built from quickbus's source tree \
             (cargo build --release -p quickbus-daemon -p quickbus-bench), and is not packaged"
        ))
    } else {
        Failure(format!("cannot run {}: {error}", program.display()))
    }
}

fn beside_this_binary() -> Option<PathBuf> {
    let sibling = std::env::current_exe().ok()?.parent()?.join(PROGRAM);
    sibling.is_file().then_some(sibling)
}
