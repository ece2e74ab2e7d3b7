//! One look at the bus through Debug.Stats: every connection's names and
//! counters.

use std::collections::BTreeMap;
use std::time::Instant;

use quickbus_client::{bus_call, CallError, Connection, Value};

/// What one connection's GetConnectionStats said (None: key absent, e.g.
/// dbus-daemon has no traffic counters).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnStats {
    pub unique: String,
    pub names: Vec<String>,
    pub messages_in: Option<u64>,
    pub messages_out: Option<u64>,
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    pub queued_bytes: Option<u64>,
    pub match_rules: Option<u64>,
    pub pending_replies: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub conns: Vec<ConnStats>,
}

fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Uint32(n) => Some((*n).into()),
        Value::Uint64(n) => Some(*n),
        Value::Int32(n) => u64::try_from(*n).ok(),
        Value::Int64(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// The `a{sv}` reply of a Debug.Stats method as numbers by key.
pub fn numbers_of(values: Vec<Value>) -> BTreeMap<String, u64> {
    let Some(Value::Array { items, .. }) = values.into_iter().next() else {
        return BTreeMap::new();
    };
    items
        .into_iter()
        .filter_map(|entry| match entry {
            Value::DictEntry(k, v) => match (*k, *v) {
                (Value::String(k), Value::Variant(v)) => number(&v).map(|n| (k, n)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn strings(values: Vec<Value>) -> Vec<String> {
    match values.into_iter().next() {
        Some(Value::Array { items, .. }) => items
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Ask the bus about every connection.
pub fn take(bus: &mut Connection) -> Result<Sample, CallError> {
    let names = strings(bus.call(bus_call("ListNames"))?.body_values()?);
    let mut owned: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in names.iter().filter(|n| !n.starts_with(':')) {
        if name == quickbus_client::BUS_NAME {
            continue;
        }
        // Gone meanwhile: skip it.
        if let Ok(owner) = bus.get_name_owner(name) {
            owned.entry(owner).or_default().push(name.clone());
        }
    }
    let mut conns = Vec::new();
    for unique in names.iter().filter(|n| n.starts_with(':')) {
        let call = bus_call("GetConnectionStats")
            .interface("org.freedesktop.DBus.Debug.Stats")
            .body(vec![Value::String(unique.clone())]);
        let stats = match bus.call(call) {
            Ok(reply) => numbers_of(reply.body_values()?),
            Err(CallError::Remote(_)) => continue, // it left
            Err(e) => return Err(e),
        };
        let get = |key: &str| stats.get(key).copied();
        conns.push(ConnStats {
            unique: unique.clone(),
            names: owned.remove(unique).unwrap_or_default(),
            messages_in: get("MessagesIn"),
            messages_out: get("MessagesOut"),
            bytes_in: get("BytesIn"),
            bytes_out: get("BytesOut"),
            queued_bytes: get("QueuedBytes").or(get("OutgoingBytes")),
            match_rules: get("MatchRules"),
            pending_replies: get("PendingReplies"),
        });
    }
    Ok(Sample {
        at: Instant::now(),
        conns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_dicts_become_numbers() {
        let entry = |k: &str, v: Value| {
            Value::DictEntry(
                Box::new(Value::String(k.into())),
                Box::new(Value::Variant(Box::new(v))),
            )
        };
        let dict = Value::Array {
            elem_sig: "{sv}".into(),
            items: vec![
                entry("MessagesIn", Value::Uint64(7)),
                entry("MatchRules", Value::Uint32(2)),
                entry("UniqueName", Value::String(":1.1".into())),
            ],
        };
        let n = numbers_of(vec![dict]);
        assert_eq!(n.get("MessagesIn"), Some(&7));
        assert_eq!(n.get("MatchRules"), Some(&2));
        assert!(!n.contains_key("UniqueName"));
        assert!(numbers_of(vec![]).is_empty());
    }
}
