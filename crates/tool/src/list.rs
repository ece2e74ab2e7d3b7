//! `quickbus list`: every name on the bus with its owner's unique name,
//! pid and uid, like `busctl list`.

use quickbus_client::{bus_call, CallError, Connection, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    All,
    Unique,
    Acquired,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    /// None for an activatable name nobody owns yet.
    pub owner: Option<String>,
    pub pid: Option<u32>,
    pub uid: Option<u32>,
    pub process: Option<String>,
}

/// Ask the bus for its names (running and activatable) and their owners.
pub fn collect(bus: &mut Connection, filter: Filter) -> Result<Vec<Row>, CallError> {
    let mut names = string_list(bus, "ListNames")?;
    // Activatable names are shown even when nobody owns them; a bus that
    // does not implement the call just has none.
    let activatable = string_list(bus, "ListActivatableNames").unwrap_or_default();
    names.extend(activatable);
    names.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    names.dedup();
    let mut rows = Vec::with_capacity(names.len());
    for name in names {
        let unique = name.starts_with(':');
        match filter {
            Filter::Unique if !unique => continue,
            Filter::Acquired if unique => continue,
            _ => {}
        }
        // The owner can vanish between ListNames and these calls: a name
        // without an owner is shown as activatable, missing details as "-".
        let owner = single_string(bus, "GetNameOwner", &name).ok();
        let (pid, uid) = match &owner {
            Some(_) => (
                single_u32(bus, "GetConnectionUnixProcessID", &name).ok(),
                single_u32(bus, "GetConnectionUnixUser", &name).ok(),
            ),
            None => (None, None),
        };
        let process = pid.and_then(process_name);
        rows.push(Row {
            name,
            owner,
            pid,
            uid,
            process,
        });
    }
    Ok(rows)
}

/// Unique names first in numeric order, then well-known names.
fn sort_key(name: &str) -> (bool, Vec<u64>, &str) {
    match name.strip_prefix(':') {
        Some(rest) => (
            false,
            rest.split('.')
                .map(|p| p.parse().unwrap_or(u64::MAX))
                .collect(),
            name,
        ),
        None => (true, Vec::new(), name),
    }
}

fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_owned())
}

fn string_list(bus: &mut Connection, member: &str) -> Result<Vec<String>, CallError> {
    let reply = bus.call(bus_call(member))?;
    let mut names = Vec::new();
    if let Some(Value::Array { items, .. }) = reply.body_values()?.into_iter().next() {
        for item in items {
            if let Value::String(s) = item {
                names.push(s);
            }
        }
    }
    Ok(names)
}

fn single_string(bus: &mut Connection, member: &str, name: &str) -> Result<String, CallError> {
    let reply = bus.call(bus_call(member).body(vec![Value::String(name.into())]))?;
    match reply.body_values()?.into_iter().next() {
        Some(Value::String(s)) => Ok(s),
        _ => Err(unexpected(member)),
    }
}

fn single_u32(bus: &mut Connection, member: &str, name: &str) -> Result<u32, CallError> {
    let reply = bus.call(bus_call(member).body(vec![Value::String(name.into())]))?;
    match reply.body_values()?.first() {
        Some(Value::Uint32(n)) => Ok(*n),
        _ => Err(unexpected(member)),
    }
}

fn unexpected(member: &str) -> CallError {
    CallError::Connection(quickbus_client::Error::Protocol(format!(
        "unexpected reply to {member}"
    )))
}

/// Aligned columns: NAME PID PROCESS UID CONNECTION.
pub fn format_table(rows: &[Row]) -> String {
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|row| {
            [
                row.name.clone(),
                dash(row.pid),
                row.process.clone().unwrap_or_else(|| "-".into()),
                dash(row.uid),
                row.owner.clone().unwrap_or_else(|| "(activatable)".into()),
            ]
        })
        .collect();
    let header = ["NAME", "PID", "PROCESS", "UID", "CONNECTION"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&cells) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$} "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn dash(n: Option<u32>) -> String {
    n.map_or_else(|| "-".into(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_aligned_with_dashes_for_unknowns() {
        let rows = vec![
            Row {
                name: ":1.10".into(),
                owner: Some(":1.10".into()),
                pid: Some(42),
                uid: Some(1000),
                process: Some("cat".into()),
            },
            Row {
                name: "org.example.Service".into(),
                owner: None,
                pid: None,
                uid: None,
                process: None,
            },
        ];
        assert_eq!(
            format_table(&rows),
            "NAME                PID PROCESS UID  CONNECTION\n\
             :1.10               42  cat     1000 :1.10\n\
             org.example.Service -   -       -    (activatable)\n"
        );
    }

    #[test]
    fn unique_names_sort_numerically_before_well_known_ones() {
        let mut names = vec!["org.b", ":1.10", "org.a", ":1.9", ":1.100"];
        names.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
        assert_eq!(names, [":1.9", ":1.10", ":1.100", "org.a", "org.b"]);
    }
}
