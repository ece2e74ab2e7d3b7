//! Instruction counts of quickbus-daemon run under callgrind: on a shared
//! machine they repeat where wall-clock and even CPU time do not. The
//! daemon is started through a wrapper script; `callgrind_control -d`
//! dumps (and resets) its counters between measurements.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for one dump.
const DUMP_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Callgrind {
    dir: PathBuf,
    wrapper: PathBuf,
}

impl Callgrind {
    /// Write the wrapper that runs `daemon` under callgrind.
    pub fn prepare(daemon: &Path) -> Result<Callgrind, String> {
        for tool in ["valgrind", "callgrind_control"] {
            let found = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok();
            if !found {
                return Err(format!("{tool} not found (apt-get install -y valgrind)"));
            }
        }
        let dir = std::env::temp_dir().join(format!("quickbus-callgrind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let wrapper = dir.join("quickbus-daemon-callgrind");
        let script = format!(
            "#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file={}/cg.out.%p '{}' \"$@\"\n",
            dir.display(),
            daemon.display()
        );
        std::fs::write(&wrapper, script).map_err(|e| format!("{}: {e}", wrapper.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", wrapper.display()))?;
        Ok(Callgrind { dir, wrapper })
    }

    /// The program to start instead of quickbus-daemon.
    pub fn wrapper(&self) -> &Path {
        &self.wrapper
    }

    /// Instructions process `pid` ran since its previous dump (or start).
    pub fn take(&self, pid: u32) -> Result<u64, String> {
        let mut child = Command::new("callgrind_control")
            .arg("-d")
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("callgrind_control: {e}"))?;
        let deadline = Instant::now() + DUMP_TIMEOUT;
        loop {
            match child.try_wait().map_err(|e| e.to_string())? {
                Some(status) if status.success() => break,
                Some(status) => return Err(format!("callgrind_control -d {pid}: {status}")),
                None if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("callgrind_control -d {pid} did not finish"));
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        let dump = self
            .newest_dump(pid)
            .ok_or_else(|| format!("no callgrind dump of {pid} in {}", self.dir.display()))?;
        let text =
            std::fs::read_to_string(&dump).map_err(|e| format!("{}: {e}", dump.display()))?;
        let _ = std::fs::remove_file(&dump);
        totals(&text).ok_or_else(|| format!("{}: no totals line", dump.display()))
    }

    /// `cg.out.PID.N` with the highest N.
    fn newest_dump(&self, pid: u32) -> Option<PathBuf> {
        let prefix = format!("cg.out.{pid}.");
        std::fs::read_dir(&self.dir)
            .ok()?
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let n: u64 = name.strip_prefix(&prefix)?.parse().ok()?;
                Some((n, entry.path()))
            })
            .max_by_key(|(n, _)| *n)
            .map(|(_, path)| path)
    }
}

impl Drop for Callgrind {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The instruction count of a callgrind dump (its `totals:` line, or the
/// `summary:` line of older formats).
fn totals(dump: &str) -> Option<u64> {
    dump.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_are_read_from_a_dump() {
        assert_eq!(
            totals("part: 2\nsummary: 96\nfn=x\n1 2\ntotals: 96\n"),
            Some(96)
        );
        assert_eq!(totals("events: Ir\nsummary: 5441\n"), Some(5441));
        assert_eq!(totals("events: Ir\n"), None);
    }
}
