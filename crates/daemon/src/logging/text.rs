//! An event as one line of text, for standard error and syslog: the
//! message, then any other fields as ` name=value`. The connection fields
//! (`dbus_*`) are left out: they are for the journal, and the texts that
//! carry them already say who the connection is, as dbus-daemon's do.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing::Event;

/// Fields only the journal gets.
const STRUCTURED_ONLY: &str = "dbus_";

pub fn render(event: &Event<'_>) -> String {
    let mut line = Line::default();
    event.record(&mut line);
    line.message + &line.fields
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.record_debug(field, &format_args!("{value}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            name if name.starts_with(STRUCTURED_ONLY) => {}
            name => {
                let _ = write!(self.fields, " {name}={value:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::{Context, SubscriberExt};

    /// Renders every event into a shared list.
    struct Capture(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            self.0.lock().unwrap().push(render(event));
        }
    }

    #[test]
    fn messages_keep_extra_fields_and_drop_the_journal_ones() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(lines.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let name = ":1.5";
            tracing::warn!(
                dbus_unique_name = name,
                dbus_peer_uid = 0,
                "disconnecting {name}"
            );
            tracing::info!(limit = 3, reason = "full", "plain");
        });
        assert_eq!(
            *lines.lock().unwrap(),
            ["disconnecting :1.5", "plain limit=3 reason=full"]
        );
    }
}
