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

/// Fields only the journal gets.
const STRUCTURED_ONLY: &str = "dbus_";

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
    /// take in time (the queue to the log's thread was full).
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
            fields: Vec::new(),
        }
    }

    /// The line for standard error and syslog.
    pub fn text(&self) -> String {
        let mut text = self.message.clone();
        for (name, value) in &self.fields {
            if !name.starts_with(STRUCTURED_ONLY) {
                let _ = write!(text, " {name}={value}");
            }
        }
        text
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
}
