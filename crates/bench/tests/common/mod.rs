//! Shared by the bench smoke tests (each test file is its own crate).

use std::path::PathBuf;

/// The quickbus-daemon built beside the quickbus-bench binary under test.
pub fn quickbus_daemon() -> PathBuf {
    let tool = PathBuf::from(env!("CARGO_BIN_EXE_quickbus-bench"));
    let daemon = tool.with_file_name("quickbus-daemon");
    assert!(
        daemon.exists(),
        "{} missing: run `cargo build -p quickbus-daemon` first",
        daemon.display()
    );
    daemon
}
