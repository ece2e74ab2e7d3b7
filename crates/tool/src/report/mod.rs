//! `quickbus report FILE -o report.html`: one self-contained HTML page (no
//! network, script and style inline): a sequence diagram with filters,
//! charts of rate and size over time, and the statistics tables.

mod charts;
mod data;

use std::fmt::Write;
use std::path::PathBuf;

use clap::Args;

use crate::analysis::{cells, Analysis};
use crate::Failure;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("viewer.js");
/// Rows per statistics table.
const TABLE_ROWS: usize = 50;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A pcap capture (quickbus capture, dbus-monitor --pcap, Bustle)
    pub file: PathBuf,
    /// The HTML file to write
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
}

pub fn run(args: &ReportArgs) -> Result<(), Failure> {
    let analysis = crate::stats::load_file(&args.file)?;
    let title = args.file.file_name().map_or_else(
        || args.file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let html = page(&analysis, &title);
    std::fs::write(&args.output, html)
        .map_err(|e| Failure(format!("cannot write {}: {e}", args.output.display())))?;
    eprintln!(
        "{} messages, {} services: report written to {}",
        analysis.entries.len(),
        analysis.names.len(),
        args.output.display()
    );
    Ok(())
}

/// The whole page.
pub fn page(analysis: &Analysis, title: &str) -> String {
    let summary = format!(
        "{} messages over {:.3} s{}",
        analysis.entries.len(),
        analysis.duration().as_secs_f64(),
        if analysis.undecodable > 0 {
            format!("; {} records were not D-Bus messages", analysis.undecodable)
        } else {
            String::new()
        }
    );
    // "</" inside the JSON would end the script element early.
    let data = data::columns(analysis).to_string().replace("</", "<\\/");
    // Filled last to first, so text from the capture (title) is never
    // scanned for the placeholders that follow it.
    PAGE.replacen("{{SCRIPT}}", SCRIPT, 1)
        .replacen("{{DATA}}", &data, 1)
        .replacen("{{TABLES}}", &tables(analysis), 1)
        .replacen("{{CHARTS}}", &charts::charts(analysis), 1)
        .replacen("{{SUMMARY}}", &escape(&summary), 1)
        .replacen("{{TITLE}}", &escape(title), 2)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An HTML table; columns listed in `numeric` are right-aligned.
fn table(
    out: &mut String,
    id: &str,
    title: &str,
    header: &[&str],
    numeric: usize,
    rows: Vec<Vec<String>>,
) {
    let total = rows.len();
    let _ = write!(out, "<h3>{title}</h3><table id=\"{id}\"><tr>");
    for (i, h) in header.iter().enumerate() {
        let class = if i < numeric { " class=\"n\"" } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", escape(h));
    }
    out.push_str("</tr>");
    for row in rows.into_iter().take(TABLE_ROWS) {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if i < numeric { " class=\"n\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    if total > TABLE_ROWS {
        let _ = write!(
            out,
            "<p>{} more rows: see <code>quickbus stats --limit 0</code>.</p>",
            total - TABLE_ROWS
        );
    }
}

fn tables(a: &Analysis) -> String {
    let mut out = String::new();
    table(
        &mut out,
        "frequencies",
        "Message frequencies",
        cells::FREQUENCY_HEADERS,
        2,
        cells::frequency_rows(a.frequencies()),
    );
    table(
        &mut out,
        "durations",
        "Method durations (ms)",
        cells::DURATION_HEADERS,
        8,
        cells::duration_rows(a.method_times()),
    );
    table(
        &mut out,
        "sizes",
        "Message sizes (bytes)",
        cells::SIZE_HEADERS,
        4,
        cells::size_rows(a.sizes()),
    );
    let rows = a
        .talkers()
        .into_iter()
        .map(|t| {
            vec![
                t.messages.to_string(),
                t.bytes.to_string(),
                t.sender,
                t.names.join(", "),
            ]
        })
        .collect();
    table(
        &mut out,
        "talkers",
        "Top talkers",
        &["messages", "bytes", "sender", "names"],
        2,
        rows,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{load, tests::sample_capture};

    #[test]
    fn the_page_is_whole_and_offline() {
        let a = load(&sample_capture()[..]).unwrap();
        let html = page(&a, "x<y>.pcap");
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("{{"), "a placeholder is left");
        assert!(html.contains("x&lt;y&gt;.pcap"));
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "no network"
        );
        assert!(html.contains("<table id=\"durations\">"));
        assert!(html.contains("org.example.Svc.Ping"));
        assert_eq!(html.matches("<script").count(), 2);
    }

    #[test]
    fn capture_text_cannot_close_the_script() {
        let a = load(&sample_capture()[..]).unwrap();
        let mut a = a;
        a.entries[1].member = "</script><b>".into();
        let html = page(&a, "t");
        assert_eq!(html.matches("</script>").count(), 2);
        assert!(
            html.contains("&lt;/script&gt;&lt;b&gt;"),
            "escaped in the tables"
        );
    }
}
