//! Asking the bus about itself from a test: Debug.Stats counters, and
//! turning a connection into a monitor.

use quickbus_client::{Connection, MessageBuilder, Value, BUS_NAME};

/// The u64 `key` of `name`'s entry in Debug.Stats.GetConnectionStats
/// (quickbus's own counters: Dropped, QueuedBytes, PeakQueuedBytes, ...).
pub fn connection_stat(conn: &mut Connection, name: &str, key: &str) -> u64 {
    let call = quickbus_client::bus_call("GetConnectionStats")
        .interface("org.freedesktop.DBus.Debug.Stats")
        .body(vec![Value::String(name.into())]);
    let reply = conn.call(call).expect("GetConnectionStats");
    let Some(Value::Array { items, .. }) = reply.body_values().expect("body").into_iter().next()
    else {
        panic!("GetConnectionStats returned no dict");
    };
    items
        .into_iter()
        .find_map(|entry| match entry {
            Value::DictEntry(k, value) => match (*k, *value) {
                (Value::String(k), Value::Variant(v)) if k == key => match *v {
                    Value::Uint64(n) => Some(n),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .unwrap_or_else(|| panic!("no u64 {key} in GetConnectionStats"))
}

/// Make `conn` a monitor of the messages `rules` select (all when empty).
pub fn become_monitor(conn: &mut Connection, rules: &[&str]) {
    let call = MessageBuilder::method_call("/org/freedesktop/DBus", "BecomeMonitor")
        .interface("org.freedesktop.DBus.Monitoring")
        .destination(BUS_NAME)
        .body(vec![
            Value::Array {
                elem_sig: "s".into(),
                items: rules.iter().map(|r| Value::String((*r).into())).collect(),
            },
            Value::Uint32(0),
        ]);
    conn.call(call).expect("BecomeMonitor");
}
