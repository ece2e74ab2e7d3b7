//! The table `top` draws: rates from two samples, sorted by a column.

use std::fmt::Write;

use super::sample::{ConnStats, Sample};

/// Columns one can sort by, with the key that selects each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    MessagesIn,
    MessagesOut,
    BytesIn,
    BytesOut,
    Queued,
    Rules,
    Pending,
    Name,
}

impl SortBy {
    pub fn from_key(key: u8) -> Option<SortBy> {
        Some(match key {
            b'i' => SortBy::MessagesIn,
            b'o' => SortBy::MessagesOut,
            b'I' => SortBy::BytesIn,
            b'O' => SortBy::BytesOut,
            b'u' => SortBy::Queued,
            b'r' => SortBy::Rules,
            b'p' => SortBy::Pending,
            b'n' => SortBy::Name,
            _ => return None,
        })
    }

    pub fn label(self) -> &'static str {
        match self {
            SortBy::MessagesIn => "msg/s in",
            SortBy::MessagesOut => "msg/s out",
            SortBy::BytesIn => "B/s in",
            SortBy::BytesOut => "B/s out",
            SortBy::Queued => "queued",
            SortBy::Rules => "rules",
            SortBy::Pending => "pending",
            SortBy::Name => "name",
        }
    }
}

/// One connection's line.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub unique: String,
    pub names: String,
    pub messages_in: Option<f64>,
    pub messages_out: Option<f64>,
    pub bytes_in: Option<f64>,
    pub bytes_out: Option<f64>,
    pub queued: Option<u64>,
    pub rules: Option<u64>,
    pub pending: Option<u64>,
}

/// Per-second rates between `before` and `now` (None for a connection new
/// in `now`, or counters the bus does not have).
pub fn rows(before: Option<&Sample>, now: &Sample) -> Vec<Row> {
    let seconds = before
        .map(|b| now.at.duration_since(b.at).as_secs_f64())
        .filter(|s| *s > 0.0);
    now.conns
        .iter()
        .map(|c| {
            let old: Option<&ConnStats> =
                before.and_then(|b| b.conns.iter().find(|o| o.unique == c.unique));
            let rate = |get: fn(&ConnStats) -> Option<u64>| {
                let (old, secs) = (old?, seconds?);
                let delta = get(c)?.saturating_sub(get(old)?);
                Some(delta as f64 / secs)
            };
            Row {
                unique: c.unique.clone(),
                names: c.names.join(","),
                messages_in: rate(|s| s.messages_in),
                messages_out: rate(|s| s.messages_out),
                bytes_in: rate(|s| s.bytes_in),
                bytes_out: rate(|s| s.bytes_out),
                queued: c.queued_bytes,
                rules: c.match_rules,
                pending: c.pending_replies,
            }
        })
        .collect()
}

/// Biggest first (names alphabetically); unknown values last.
pub fn sort(rows: &mut [Row], by: SortBy) {
    let key = |r: &Row| -> f64 {
        let v = match by {
            SortBy::MessagesIn => r.messages_in,
            SortBy::MessagesOut => r.messages_out,
            SortBy::BytesIn => r.bytes_in,
            SortBy::BytesOut => r.bytes_out,
            SortBy::Queued => r.queued.map(|n| n as f64),
            SortBy::Rules => r.rules.map(|n| n as f64),
            SortBy::Pending => r.pending.map(|n| n as f64),
            SortBy::Name => None,
        };
        v.unwrap_or(-1.0)
    };
    if by == SortBy::Name {
        let label = |r: &Row| {
            if r.names.is_empty() {
                r.unique.clone()
            } else {
                r.names.clone()
            }
        };
        rows.sort_by_key(label);
    } else {
        rows.sort_by(|a, b| {
            key(b)
                .total_cmp(&key(a))
                .then_with(|| a.unique.cmp(&b.unique))
        });
    }
}

fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn count(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// The whole screen as lines: a title, the header, then as many rows as
/// `height` allows, each cut to `width`.
pub fn render(rows: &[Row], by: SortBy, width: usize, height: usize) -> Vec<String> {
    let total_in: f64 = rows.iter().filter_map(|r| r.messages_in).sum();
    let mut lines = vec![
        format!(
            "quickbus top - {} connections, {total_in:.1} msg/s into the bus - sorted by {}",
            rows.len(),
            by.label()
        ),
        "keys: i/o msg/s in/out  I/O bytes/s in/out  u queued  r rules  p pending  n name  q quit"
            .to_owned(),
        format!(
            "{:>10} {:>10} {:>12} {:>12} {:>9} {:>6} {:>7}  {:<10} {}",
            "MSG/S IN",
            "MSG/S OUT",
            "B/S IN",
            "B/S OUT",
            "QUEUED",
            "RULES",
            "PENDING",
            "UNIQUE",
            "NAMES"
        ),
    ];
    for r in rows.iter().take(height.saturating_sub(lines.len())) {
        let mut line = String::new();
        let _ = write!(
            line,
            "{:>10} {:>10} {:>12} {:>12} {:>9} {:>6} {:>7}  {:<10} {}",
            rate(r.messages_in),
            rate(r.messages_out),
            rate(r.bytes_in),
            rate(r.bytes_out),
            count(r.queued),
            count(r.rules),
            count(r.pending),
            r.unique,
            r.names
        );
        lines.push(line);
    }
    for line in &mut lines {
        if line.len() > width {
            let mut cut = width;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn conn(unique: &str, name: &str, messages_in: u64) -> ConnStats {
        ConnStats {
            unique: unique.into(),
            names: if name.is_empty() {
                vec![]
            } else {
                vec![name.into()]
            },
            messages_in: Some(messages_in),
            messages_out: Some(0),
            bytes_in: Some(messages_in * 100),
            bytes_out: Some(0),
            queued_bytes: Some(0),
            match_rules: Some(1),
            pending_replies: Some(0),
        }
    }

    #[test]
    fn rates_come_from_two_samples() {
        let t = Instant::now();
        let before = Sample {
            at: t,
            conns: vec![conn(":1.1", "a.b", 10), conn(":1.2", "", 0)],
        };
        let now = Sample {
            at: t + Duration::from_secs(2),
            conns: vec![
                conn(":1.1", "a.b", 30),
                conn(":1.2", "", 4),
                conn(":1.3", "", 9),
            ],
        };
        let mut rows = rows(Some(&before), &now);
        assert_eq!(rows[0].messages_in, Some(10.0));
        assert_eq!(rows[0].bytes_in, Some(1000.0));
        assert_eq!(rows[1].messages_in, Some(2.0));
        assert_eq!(rows[2].messages_in, None, "new connection: no rate yet");
        sort(&mut rows, SortBy::MessagesIn);
        let order: Vec<&str> = rows.iter().map(|r| r.unique.as_str()).collect();
        assert_eq!(order, [":1.1", ":1.2", ":1.3"]);
        sort(&mut rows, SortBy::Name);
        let order: Vec<&str> = rows.iter().map(|r| r.unique.as_str()).collect();
        assert_eq!(order, [":1.2", ":1.3", ":1.1"]);
        assert!(super::rows(None, &now)
            .iter()
            .all(|r| r.messages_in.is_none()));
    }

    #[test]
    fn the_screen_fits_the_terminal() {
        let t = Instant::now();
        let before = Sample {
            at: t,
            conns: vec![conn(":1.1", "org.example.Long", 0)],
        };
        let now = Sample {
            at: t + Duration::from_secs(1),
            conns: vec![conn(":1.1", "org.example.Long", 5)],
        };
        let rows = rows(Some(&before), &now);
        let lines = render(&rows, SortBy::MessagesIn, 200, 10);
        assert_eq!(lines.len(), 4);
        assert!(
            lines[0].contains("1 connections, 5.0 msg/s"),
            "{}",
            lines[0]
        );
        assert!(lines[3].trim_start().starts_with("5.0 "), "{}", lines[3]);
        assert!(
            lines[3].ends_with(":1.1       org.example.Long"),
            "{}",
            lines[3]
        );
        let narrow = render(&rows, SortBy::Name, 20, 3);
        assert_eq!(narrow.len(), 3);
        assert!(narrow.iter().all(|l| l.len() <= 20));
        assert!(SortBy::from_key(b'x').is_none());
        assert_eq!(SortBy::from_key(b'O'), Some(SortBy::BytesOut));
    }
}
