//! A log line as the log's thread takes it: formatted on the thread that
//! logs, owned, and sent by the log's thread to each sink of the moment
//! (standard error and syslog as one line of text, the journal as an
//! entry of fields).
//!
//! The text is the message, then any other fields as ` name=value`. The
//! connection fields (`dbus_*`) are left out of it: they are for the
//! journal, and the texts that carry them already say who the connection
//! is, as dbus-daemon's do.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing::{Event, Level};

/// Fields only the journal gets: the connection's, and the counts of a
/// line saying lines were lost ([`Record::lost_lines`]), which its text
/// already says in words.
const STRUCTURED_ONLY: [&str; 2] = ["dbus_", "log_lost_"];

/// One line, ready for every sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub level: Level,
    /// A security message (policy denials): notice priority, auth facility.
    pub security: bool,
    /// Where the line was logged (the journal's `TARGET`, `CODE_FILE`,
    /// `CODE_LINE`).
    pub target: &'static str,
    pub file: Option<&'static str>,
    pub line: Option<u32>,
    pub message: String,
    /// The event's other fields, in order, each value as the text shows it.
    pub fields: Vec<(&'static str, String)>,
}

impl Record {
    /// `event`, formatted now (on the thread that logs it).
    pub fn of_event(event: &Event<'_>) -> Record {
        let metadata = event.metadata();
        let mut record = Record {
            level: *metadata.level(),
            security: metadata.target() == super::SECURITY,
            target: metadata.target(),
            file: metadata.file(),
            line: metadata.line(),
            message: String::new(),
            fields: Vec::new(),
        };
        event.record(&mut record);
        record
    }

    /// The warning that takes the place of `count` lines the log could not
    /// take in time (the queue to the log's thread was full, or an exec
    /// left them queued), of kinds unknown (in the journal,
    /// `LOG_LOST_LINES=count`).
    pub fn lost(count: u64) -> Record {
        let (lines, them) = if count == 1 {
            ("line was", "it")
        } else {
            ("lines were", "them")
        };
        Record {
            level: Level::WARN,
            security: false,
            target: module_path!(),
            file: None,
            line: None,
            message: format!("{count} log {lines} lost: the log did not take {them} in time"),
            fields: vec![("log_lost_lines", count.to_string())],
        }
    }

    /// The warning that takes the place of the `lost` lines, saying of
    /// what kinds they were: "12 log lines were lost: the log did not
    /// take them in time (10 policy denials, 2 other lines)", the kinds
    /// none were of left out; in the journal, the counts as fields too
    /// (`LOG_LOST_LINES`, `LOG_LOST_WARNINGS`, `LOG_LOST_DENIALS`,
    /// `LOG_LOST_OTHER`).
    pub fn lost_lines(lost: &LostLines) -> Record {
        let mut record = Record::lost(lost.total());
        let kinds = [
            (lost.warnings, "warning or error", "warnings or errors"),
            (lost.denials, "policy denial", "policy denials"),
            (lost.other, "other line", "other lines"),
        ];
        let said: Vec<String> = kinds
            .iter()
            .filter(|(count, ..)| *count > 0)
            .map(|&(count, one, many)| format!("{count} {}", if count == 1 { one } else { many }))
            .collect();
        let _ = write!(record.message, " ({})", said.join(", "));
        record.fields.extend([
            ("log_lost_warnings", lost.warnings.to_string()),
            ("log_lost_denials", lost.denials.to_string()),
            ("log_lost_other", lost.other.to_string()),
        ]);
        record
    }

    /// The line for standard error and syslog.
    pub fn text(&self) -> String {
        let mut text = self.message.clone();
        for (name, value) in &self.fields {
            if !STRUCTURED_ONLY
                .iter()
                .any(|prefix| name.starts_with(prefix))
            {
                let _ = write!(text, " {name}={value}");
            }
        }
        text
    }
}

/// Lines that found the log's queue full, by kind: what an administrator
/// wants to know first is whether warnings went missing, or only a flood
/// of a peer's policy denials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LostLines {
    /// Warnings and errors (of the bus, not security lines).
    pub warnings: u64,
    /// Security lines: policy denials (and the "Would reject" lines of
    /// rules with `log="true"`, AppArmor's denials).
    pub denials: u64,
    /// Every other line (info, debug).
    pub other: u64,
}

impl LostLines {
    /// Count `record` as lost.
    pub fn add(&mut self, record: &Record) {
        if record.security {
            self.denials += 1;
        } else if record.level <= Level::WARN {
            self.warnings += 1;
        } else {
            self.other += 1;
        }
    }

    pub fn total(&self) -> u64 {
        self.warnings + self.denials + self.other
    }
}

impl Visit for Record {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.fields.push((field.name(), value.to_owned()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            self.fields.push((field.name(), format!("{value:?}")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::{Context, SubscriberExt};

    /// Formats every event into a shared list.
    struct Capture(Arc<Mutex<Vec<Record>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            self.0.lock().unwrap().push(Record::of_event(event));
        }
    }

    fn capture(log: impl FnOnce()) -> Vec<Record> {
        let records = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(records.clone()));
        tracing::subscriber::with_default(subscriber, log);
        let records = records.lock().unwrap().clone();
        records
    }

    #[test]
    fn the_text_keeps_extra_fields_and_drops_the_journal_ones() {
        let records = capture(|| {
            let name = ":1.5";
            tracing::warn!(
                dbus_unique_name = name,
                dbus_peer_uid = 0,
                "disconnecting {name}"
            );
            tracing::info!(limit = 3, reason = "full", "plain");
        });
        let texts: Vec<String> = records.iter().map(Record::text).collect();
        assert_eq!(texts, ["disconnecting :1.5", "plain limit=3 reason=full"]);
        // The journal gets them all, strings as they are.
        assert_eq!(
            records[0].fields,
            [
                ("dbus_unique_name", ":1.5".to_owned()),
                ("dbus_peer_uid", "0".to_owned())
            ]
        );
        assert_eq!(records[0].level, Level::WARN);
        assert!(!records[0].security);
    }

    #[test]
    fn security_lines_are_marked() {
        let records = capture(|| tracing::info!(target: super::super::SECURITY, "denied"));
        assert!(records[0].security);
        assert_eq!(records[0].target, "security");
        assert!(records[0].line.is_some());
    }

    #[test]
    fn the_lost_line_counts_in_words() {
        let one = Record::lost(1);
        assert_eq!(one.level, Level::WARN);
        assert_eq!(
            one.text(),
            "1 log line was lost: the log did not take it in time"
        );
        assert!(Record::lost(7)
            .text()
            .starts_with("7 log lines were lost: the log did not take them in time"));
    }

    #[test]
    fn the_lost_lines_kinds_are_said_in_words_those_of_none_left_out() {
        let said = |warnings, denials, other| {
            let lost = LostLines {
                warnings,
                denials,
                other,
            };
            let text = Record::lost_lines(&lost).text();
            text.split_once(" in time ").unwrap().1.to_owned()
        };
        assert_eq!(
            said(1, 1, 1),
            "(1 warning or error, 1 policy denial, 1 other line)"
        );
        assert_eq!(said(3, 0, 2), "(3 warnings or errors, 2 other lines)");
        assert_eq!(said(0, 12, 0), "(12 policy denials)");
        let one = Record::lost_lines(&LostLines {
            denials: 1,
            ..LostLines::default()
        });
        assert_eq!(one.level, Level::WARN);
        assert_eq!(
            one.text(),
            "1 log line was lost: the log did not take it in time (1 policy denial)"
        );
    }
}
