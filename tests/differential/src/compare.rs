//! Comparing the transcripts of the two daemons: a line diff per stream.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;

use crate::script::Transcript;

/// `run` applied to every item on `workers` threads; the results in the
/// items' order.
pub fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    run: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, R)>> = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(index) else {
                    break;
                };
                let result = run(item);
                results.lock().unwrap().push((index, result));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(index, _)| *index);
    results.into_iter().map(|(_, result)| result).collect()
}

/// Prints `transcript` of scenario `name` run on `which`.
pub fn print_transcript(name: &str, which: &str, transcript: &Transcript) {
    println!("=== {name} on {which}");
    for (stream, lines) in transcript {
        println!("  {stream}:");
        for line in lines {
            println!("    {line}");
        }
    }
}

/// None when the transcripts agree, else a readable diff: for each stream
/// that differs, its lines with `-` for the reference's only, `+` for
/// quickbus's only, and two spaces for both.
pub fn diff(reference: &Transcript, quickbus: &Transcript) -> Option<String> {
    let mut out = String::new();
    let mut streams: Vec<&String> = reference.keys().chain(quickbus.keys()).collect();
    streams.sort();
    streams.dedup();
    let empty = Vec::new();
    for stream in streams {
        let a = reference.get(stream).unwrap_or(&empty);
        let b = quickbus.get(stream).unwrap_or(&empty);
        if a == b {
            continue;
        }
        out.push_str(&format!("  {stream} (- dbus-daemon, + quickbus):\n"));
        for line in line_diff(a, b) {
            out.push_str("    ");
            out.push_str(&line);
            out.push('\n');
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A longest-common-subsequence diff of two short line lists.
fn line_diff(a: &[String], b: &[String]) -> Vec<String> {
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(format!("  {}", a[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(format!("+ {}", b[j]));
            j += 1;
        } else {
            out.push(format!("- {}", a[i]));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(streams: &[(&str, &[&str])]) -> Transcript {
        streams
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn equal_transcripts_have_no_diff() {
        let a = t(&[("monitor", &["x", "y"])]);
        assert_eq!(diff(&a, &a.clone()), None);
    }

    #[test]
    fn a_diff_marks_each_sides_lines() {
        let a = t(&[("monitor", &["x", "y", "z"]), ("client a", &["1"])]);
        let b = t(&[("monitor", &["x", "w", "z"]), ("client a", &["1"])]);
        let text = diff(&a, &b).unwrap();
        assert!(text.contains("monitor"), "{text}");
        assert!(!text.contains("client a"), "{text}");
        assert!(text.contains("    - y\n"), "{text}");
        assert!(text.contains("    + w\n"), "{text}");
        assert!(text.contains("      x\n"), "{text}");
    }
}
