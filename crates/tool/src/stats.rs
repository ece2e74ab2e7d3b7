//! `quickbus stats FILE`: tables of a capture: message frequencies per
//! type and member, method durations, message sizes, top talkers (or the
//! same as JSON).

use std::fmt::Write;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use crate::analysis::{self, cells, Analysis};
use crate::Failure;

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// A pcap capture (quickbus capture, dbus-monitor --pcap, Bustle)
    pub file: PathBuf,
    /// Rows per table (0: all)
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
    /// Print JSON (every row) instead of tables
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &StatsArgs) -> Result<(), Failure> {
    let analysis = load_file(&args.file)?;
    if args.json {
        println!("{}", to_json(&analysis));
    } else {
        print!(
            "{}",
            format_tables(&analysis, &args.file.display().to_string(), args.limit)
        );
    }
    Ok(())
}

/// Read and analyse a capture file, with the file name in any error.
pub fn load_file(path: &std::path::Path) -> Result<Analysis, Failure> {
    let file =
        File::open(path).map_err(|e| Failure(format!("cannot open {}: {e}", path.display())))?;
    analysis::load(BufReader::new(file)).map_err(|e| Failure(format!("{}: {e}", path.display())))
}

fn limited<T>(rows: Vec<T>, limit: usize) -> (Vec<T>, usize) {
    let total = rows.len();
    if limit == 0 || total <= limit {
        return (rows, 0);
    }
    let mut rows = rows;
    rows.truncate(limit);
    (rows, total - limit)
}

/// Right-aligned numeric columns, a left-aligned last column.
fn table(out: &mut String, title: &str, header: &[&str], rows: Vec<Vec<String>>, hidden: usize) {
    let _ = writeln!(out, "\n{title}");
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String], out: &mut String| {
        let last = cells.len() - 1;
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                let _ = write!(out, "  {cell}");
            } else {
                let _ = write!(out, "  {cell:>w$}");
            }
        }
        out.push('\n');
    };
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    line(&header, out);
    for row in &rows {
        line(row, out);
    }
    if hidden > 0 {
        let _ = writeln!(out, "  ... {hidden} more (--limit 0 shows all)");
    }
}

pub fn format_tables(a: &Analysis, name: &str, limit: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name}: {} messages over {:.3} s{}",
        a.entries.len(),
        a.duration().as_secs_f64(),
        if a.undecodable > 0 {
            format!(", {} records were not D-Bus messages", a.undecodable)
        } else {
            String::new()
        }
    );
    let (rows, hidden) = limited(a.frequencies(), limit);
    table(
        &mut out,
        "Message frequencies",
        cells::FREQUENCY_HEADERS,
        cells::frequency_rows(rows),
        hidden,
    );
    let (rows, hidden) = limited(a.method_times(), limit);
    table(
        &mut out,
        "Method durations (ms; calls = answered calls)",
        cells::DURATION_HEADERS,
        cells::duration_rows(rows),
        hidden,
    );
    table(
        &mut out,
        "Message sizes (bytes)",
        cells::SIZE_HEADERS,
        cells::size_rows(a.sizes()),
        0,
    );
    let (rows, hidden) = limited(a.talkers(), limit);
    let rows = rows
        .into_iter()
        .map(|t| {
            let who = if t.names.is_empty() {
                t.sender
            } else {
                format!("{} ({})", t.sender, t.names.join(", "))
            };
            vec![t.messages.to_string(), t.bytes.to_string(), who]
        })
        .collect();
    table(
        &mut out,
        "Top talkers (by messages sent)",
        &["messages", "bytes", "sender"],
        rows,
        hidden,
    );
    out
}

pub fn to_json(a: &Analysis) -> serde_json::Value {
    let summary = |s: &analysis::Summary| {
        json!({"count": s.count, "total": s.total, "min": s.min, "mean": s.mean,
               "p50": s.p50, "p99": s.p99, "max": s.max})
    };
    json!({
        "messages": a.entries.len(),
        "undecodable": a.undecodable,
        "duration": a.duration().as_secs_f64(),
        "frequencies": a.frequencies().iter().map(|r| json!({
            "type": r.kind, "member": r.member, "count": r.count, "bytes": r.bytes,
        })).collect::<Vec<_>>(),
        "methods": a.method_times().iter().map(|r| json!({
            "member": r.member, "durations": summary(&r.durations),
            "errors": r.errors, "unanswered": r.unanswered,
        })).collect::<Vec<_>>(),
        "sizes": a.sizes().iter().map(|(kind, s)| json!({
            "type": kind, "count": s.count, "smallest": s.min, "mean": s.mean,
            "largest": s.max, "total": s.total,
        })).collect::<Vec<_>>(),
        "talkers": a.talkers().iter().map(|t| json!({
            "sender": t.sender, "names": t.names, "messages": t.messages, "bytes": t.bytes,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::sample_capture;

    #[test]
    fn tables_show_each_section() {
        let a = analysis::load(&sample_capture()[..]).unwrap();
        let text = format_tables(&a, "x.pcap", 20);
        assert!(
            text.starts_with("x.pcap: 9 messages over 0.050 s\n"),
            "{text}"
        );
        for wanted in [
            "Message frequencies",
            "method_call  org.example.Svc.Ping",
            "Method durations",
            "Message sizes (bytes)",
            "Top talkers",
            ":1.2 (org.example.Svc)",
        ] {
            assert!(text.contains(wanted), "{wanted} missing in\n{text}");
        }
        // Ping: 3 answered calls, 9 ms in all, p50 2 ms, max 6 ms.
        let ping = [
            "3",
            "9.000",
            "3.000",
            "2.000",
            "6.000",
            "6.000",
            "1",
            "1",
            "org.example.Svc.Ping",
        ];
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().eq(ping.iter().copied())),
            "{text}"
        );
        let short = format_tables(&a, "x.pcap", 1);
        assert!(short.contains("more (--limit 0 shows all)"), "{short}");
    }

    #[test]
    fn json_has_every_row() {
        let a = analysis::load(&sample_capture()[..]).unwrap();
        let j = to_json(&a);
        assert_eq!(j["messages"], 9);
        assert_eq!(j["methods"][0]["member"], "org.example.Svc.Ping");
        assert_eq!(j["methods"][0]["durations"]["count"], 3);
        assert_eq!(j["methods"][0]["unanswered"], 1);
        assert_eq!(j["talkers"][1]["names"][0], "org.example.Svc");
    }
}
