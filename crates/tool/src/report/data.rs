//! The capture as the page's script reads it: one column (array) per
//! field, strings interned, times as microsecond deltas, so a million
//! messages stay a few tens of megabytes and parse in one `JSON.parse`.

use std::collections::HashMap;

use quickbus_client::MessageType;
use serde_json::json;

use crate::analysis::Analysis;

/// One column per service: a unique name shown as the first well-known
/// name it owned, well-known destinations mapped to their owner.
pub struct Participants {
    pub labels: Vec<String>,
    index: HashMap<String, usize>,
    owner_of: HashMap<String, String>,
}

impl Participants {
    fn new(analysis: &Analysis) -> Participants {
        let mut owner_of = HashMap::new();
        for (unique, names) in &analysis.names {
            for name in names {
                owner_of.insert(name.clone(), unique.clone());
            }
        }
        Participants {
            labels: Vec::new(),
            index: HashMap::new(),
            owner_of,
        }
    }

    /// Column of a sender or destination; -1 for none (a broadcast).
    fn column(&mut self, analysis: &Analysis, name: &str) -> i64 {
        if name.is_empty() {
            return -1;
        }
        let unique = self.owner_of.get(name).map_or(name, String::as_str);
        if let Some(&i) = self.index.get(unique) {
            return i as i64;
        }
        let label = match analysis.names.get(unique).and_then(|n| n.first()) {
            Some(well_known) => format!("{well_known} ({unique})"),
            None => unique.to_owned(),
        };
        let i = self.labels.len();
        self.labels.push(label);
        self.index.insert(unique.to_owned(), i);
        i as i64
    }
}

/// The JSON the page embeds.
pub fn columns(analysis: &Analysis) -> serde_json::Value {
    let entries = &analysis.entries;
    let mut participants = Participants::new(analysis);
    let mut strings: Vec<String> = Vec::new();
    let mut string_index: HashMap<String, usize> = HashMap::new();
    let mut intern = |s: &str| -> usize {
        if let Some(&i) = string_index.get(s) {
            return i;
        }
        strings.push(s.to_owned());
        string_index.insert(s.to_owned(), strings.len() - 1);
        strings.len() - 1
    };
    let n = entries.len();
    let (mut dt, mut kind, mut from, mut to) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut label, mut size) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // For a call: the index of its answer; for an answer: its call; else -1.
    let mut partner = vec![-1i64; n];
    let start = entries.first().map(|e| e.time);
    let mut last_us: i64 = 0;
    for (i, e) in entries.iter().enumerate() {
        let us = start
            .and_then(|s| e.time.duration_since(s).ok())
            .map_or(0, |d| d.as_micros() as i64);
        // Times never go backwards in the page (a clock step would).
        let us = us.max(last_us);
        dt.push(us - last_us);
        last_us = us;
        kind.push(e.kind as u8);
        from.push(participants.column(analysis, &e.sender));
        to.push(participants.column(analysis, &e.destination));
        let text = match e.kind {
            MessageType::Error => e.error_name.as_str(),
            _ => e.member.as_str(),
        };
        label.push(intern(text));
        size.push(e.size);
        if let Some(call) = e.answers {
            partner[i] = call as i64;
            partner[call] = i as i64;
        }
    }
    let t0 = start
        .and_then(|s| s.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    json!({
        "t0": t0,
        "cols": participants.labels,
        "strings": strings,
        "dt": dt,
        "kind": kind,
        "from": from,
        "to": to,
        "label": label,
        "size": size,
        "partner": partner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{load, tests::sample_capture};

    #[test]
    fn columns_are_parallel_and_paired() {
        let a = load(&sample_capture()[..]).unwrap();
        let c = columns(&a);
        let len = |k: &str| c[k].as_array().unwrap().len();
        for k in ["dt", "kind", "from", "to", "label", "size", "partner"] {
            assert_eq!(len(k), 9, "{k}");
        }
        let cols: Vec<&str> = c["cols"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(
            cols,
            ["org.freedesktop.DBus", ":1.1", "org.example.Svc (:1.2)"]
        );
        // Message 1 is the first Ping; message 2 its reply 2 ms later.
        assert_eq!(c["partner"][1], 2);
        assert_eq!(c["partner"][2], 1);
        assert_eq!(c["dt"][2], 2000);
        // Calls to the well-known name land in the owner's column.
        assert_eq!(c["to"][1], 2);
        // The broadcast signal has no destination column.
        assert_eq!(c["to"][8], -1);
        assert_eq!(c["partner"][7], -1, "unanswered call");
        let strings = c["strings"].as_array().unwrap();
        let label_of = |i: usize| {
            strings[c["label"][i].as_u64().unwrap() as usize]
                .as_str()
                .unwrap()
        };
        assert_eq!(label_of(6), "org.example.Error.Busy");
    }
}
