//! What a capture says: message counts per type and member, method call
//! durations, sizes, and who talks most. Shared by `stats` (tables) and
//! `report` (HTML).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::time::{Duration, SystemTime};

use quickbus_client::{Message, MessageType, Value};

use crate::pcap::{PcapReader, LINKTYPE_DBUS};

/// The four kinds as the tables name them.
pub fn kind_name(t: MessageType) -> &'static str {
    match t {
        MessageType::MethodCall => "method_call",
        MessageType::MethodReturn => "method_return",
        MessageType::Error => "error",
        MessageType::Signal => "signal",
    }
}

/// One captured message, reduced to what the analyses use.
#[derive(Debug, Clone)]
pub struct Entry {
    pub time: SystemTime,
    pub kind: MessageType,
    pub size: usize,
    pub sender: String,
    pub destination: String,
    /// `interface.member` for calls and signals; for replies and errors
    /// that of the call they answer (when captured); for errors the error
    /// name is in `error_name`.
    pub member: String,
    pub error_name: String,
    /// For a reply or error: the index of the call it answers.
    pub answers: Option<usize>,
}

/// Count, total, extremes and percentiles of a set of values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub total: f64,
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Nearest-rank percentiles of `values` (sorted here).
    pub fn of(mut values: Vec<f64>) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let rank = |p: f64| values[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        let total: f64 = values.iter().sum();
        Summary {
            count: n,
            total,
            min: values[0],
            mean: total / n as f64,
            p50: rank(0.50),
            p99: rank(0.99),
            max: values[n - 1],
        }
    }
}

#[derive(Debug, Default)]
pub struct Analysis {
    pub entries: Vec<Entry>,
    /// Records that were not valid D-Bus messages.
    pub undecodable: usize,
    /// Unique name -> well-known names it owned at some point.
    pub names: BTreeMap<String, Vec<String>>,
}

/// Read a whole pcap capture.
pub fn load(input: impl Read) -> Result<Analysis, String> {
    let mut reader = PcapReader::new(input).map_err(|e| e.to_string())?;
    if reader.link_type != LINKTYPE_DBUS {
        return Err(format!(
            "link type {} is not D-Bus ({LINKTYPE_DBUS})",
            reader.link_type
        ));
    }
    let mut analysis = Analysis::default();
    let mut tracker = Tracker::default();
    while let Some(record) = reader.next_record().map_err(|e| e.to_string())? {
        match Message::parse(record.data.into()) {
            Ok(msg) => {
                let entry = tracker.entry(&msg, record.time, analysis.entries.len());
                analysis.entries.push(entry);
            }
            Err(_) => analysis.undecodable += 1,
        }
    }
    analysis.names = tracker.names;
    Ok(analysis)
}

/// Follows calls (to pair replies) and name ownership through a capture.
#[derive(Default)]
struct Tracker {
    /// (caller, serial) -> index of the call.
    calls: HashMap<(String, u32), usize>,
    /// Call index -> the name a GetNameOwner call asked about.
    owner_queries: HashMap<usize, String>,
    member_of: HashMap<usize, String>,
    names: BTreeMap<String, Vec<String>>,
}

fn owned(s: Option<&str>) -> String {
    s.unwrap_or("").to_owned()
}

impl Tracker {
    fn note_owner(&mut self, name: &str, unique: &str) {
        if name.starts_with(':') || !unique.starts_with(':') {
            return;
        }
        let owned = self.names.entry(unique.to_owned()).or_default();
        if !owned.iter().any(|n| n == name) {
            owned.push(name.to_owned());
        }
    }

    fn entry(&mut self, msg: &Message, time: SystemTime, index: usize) -> Entry {
        let sender = owned(msg.sender());
        let destination = owned(msg.destination());
        let mut member = match (msg.interface(), msg.member()) {
            (Some(i), Some(m)) => format!("{i}.{m}"),
            (None, Some(m)) => m.to_owned(),
            _ => String::new(),
        };
        let mut answers = None;
        match msg.msg_type() {
            MessageType::MethodCall => {
                self.calls.insert((sender.clone(), msg.serial()), index);
                self.member_of.insert(index, member.clone());
                if member == "org.freedesktop.DBus.GetNameOwner" {
                    if let Ok(values) = msg.body_values() {
                        if let Some(Value::String(name)) = values.first() {
                            self.owner_queries.insert(index, name.clone());
                        }
                    }
                }
            }
            MessageType::MethodReturn | MessageType::Error => {
                let key = (destination.clone(), msg.reply_serial().unwrap_or(0));
                if let Some(call) = self.calls.remove(&key) {
                    answers = Some(call);
                    member = self.member_of.remove(&call).unwrap_or_default();
                    let asked = self.owner_queries.remove(&call);
                    if let (Some(name), MessageType::MethodReturn) = (asked, msg.msg_type()) {
                        if let Ok(values) = msg.body_values() {
                            if let Some(Value::String(owner)) = values.first() {
                                self.note_owner(&name, owner);
                            }
                        }
                    }
                }
            }
            MessageType::Signal => {
                if member == "org.freedesktop.DBus.NameOwnerChanged"
                    && sender == quickbus_client::BUS_NAME
                {
                    if let Ok(values) = msg.body_values() {
                        if let [Value::String(name), _, Value::String(new)] = &values[..] {
                            self.note_owner(name, new);
                        }
                    }
                }
            }
        }
        Entry {
            time,
            kind: msg.msg_type(),
            size: msg.raw().len(),
            sender,
            destination,
            member,
            error_name: owned(msg.error_name()),
            answers,
        }
    }
}

/// Messages of one type and member.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberCount {
    pub kind: &'static str,
    pub member: String,
    pub count: usize,
    pub bytes: u64,
}

/// Calls of one method and how long their replies took (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct MethodTimes {
    pub member: String,
    pub durations: Summary,
    /// Calls answered with an error.
    pub errors: usize,
    /// Calls the capture holds no answer for.
    pub unanswered: usize,
}

/// One sender's share.
#[derive(Debug, Clone, PartialEq)]
pub struct Talker {
    pub sender: String,
    /// Well-known names it owned during the capture.
    pub names: Vec<String>,
    pub messages: usize,
    pub bytes: u64,
}

impl Analysis {
    pub fn duration(&self) -> Duration {
        match (self.entries.first(), self.entries.last()) {
            (Some(a), Some(b)) => b.time.duration_since(a.time).unwrap_or_default(),
            _ => Duration::ZERO,
        }
    }

    /// Per type and member, most frequent first. Errors are listed by
    /// error name.
    pub fn frequencies(&self) -> Vec<MemberCount> {
        let mut counts: HashMap<(&'static str, &str), (usize, u64)> = HashMap::new();
        for e in &self.entries {
            let label = match e.kind {
                MessageType::Error => e.error_name.as_str(),
                _ => e.member.as_str(),
            };
            let slot = counts.entry((kind_name(e.kind), label)).or_default();
            slot.0 += 1;
            slot.1 += e.size as u64;
        }
        let mut rows: Vec<MemberCount> = counts
            .into_iter()
            .map(|((kind, member), (count, bytes))| MemberCount {
                kind,
                member: member.to_owned(),
                count,
                bytes,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.kind.cmp(b.kind))
                .then_with(|| a.member.cmp(&b.member))
        });
        rows
    }

    /// Per method, slowest total first.
    pub fn method_times(&self) -> Vec<MethodTimes> {
        #[derive(Default)]
        struct Acc {
            durations: Vec<f64>,
            calls: usize,
            errors: usize,
        }
        let mut by_member: HashMap<&str, Acc> = HashMap::new();
        for e in &self.entries {
            match e.kind {
                MessageType::MethodCall => {
                    by_member.entry(&e.member).or_default().calls += 1;
                }
                MessageType::MethodReturn | MessageType::Error => {
                    let Some(call) = e.answers else { continue };
                    let started = self.entries[call].time;
                    let took = e.time.duration_since(started).unwrap_or_default();
                    let acc = by_member.entry(&e.member).or_default();
                    acc.durations.push(took.as_secs_f64());
                    if e.kind == MessageType::Error {
                        acc.errors += 1;
                    }
                }
                MessageType::Signal => {}
            }
        }
        let mut rows: Vec<MethodTimes> = by_member
            .into_iter()
            .map(|(member, acc)| MethodTimes {
                member: member.to_owned(),
                unanswered: acc.calls.saturating_sub(acc.durations.len()),
                errors: acc.errors,
                durations: Summary::of(acc.durations),
            })
            .collect();
        rows.sort_by(|a, b| {
            b.durations
                .total
                .total_cmp(&a.durations.total)
                .then_with(|| a.member.cmp(&b.member))
        });
        rows
    }

    /// Sizes in bytes per type, then over all messages (kind "all").
    pub fn sizes(&self) -> Vec<(&'static str, Summary)> {
        let mut by_kind: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
        for e in &self.entries {
            by_kind
                .entry(kind_name(e.kind))
                .or_default()
                .push(e.size as f64);
        }
        let mut rows: Vec<(&'static str, Summary)> = by_kind
            .into_iter()
            .map(|(kind, sizes)| (kind, Summary::of(sizes)))
            .collect();
        let all = self.entries.iter().map(|e| e.size as f64).collect();
        rows.push(("all", Summary::of(all)));
        rows
    }

    /// Senders by messages sent, most first.
    pub fn talkers(&self) -> Vec<Talker> {
        let mut by_sender: HashMap<&str, (usize, u64)> = HashMap::new();
        for e in &self.entries {
            let slot = by_sender.entry(&e.sender).or_default();
            slot.0 += 1;
            slot.1 += e.size as u64;
        }
        let mut rows: Vec<Talker> = by_sender
            .into_iter()
            .map(|(sender, (messages, bytes))| Talker {
                sender: sender.to_owned(),
                names: self.names.get(sender).cloned().unwrap_or_default(),
                messages,
                bytes,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.messages
                .cmp(&a.messages)
                .then_with(|| b.bytes.cmp(&a.bytes))
                .then_with(|| a.sender.cmp(&b.sender))
        });
        rows
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pcap::PcapWriter;
    use quickbus_wire::MessageBuilder;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000) + Duration::from_millis(ms)
    }

    /// A small capture: two Ping calls (one answered in 2 ms, one in 6 ms),
    /// one failing call, one unanswered call, a signal, and ownership of
    /// org.example.Svc by :1.2.
    pub(crate) fn sample_capture() -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let mut put = |ms: u64, b: MessageBuilder, serial: u32| {
            w.write(at(ms), &b.build(serial).unwrap()).unwrap();
        };
        let ping = |serial_dest: &str| {
            MessageBuilder::method_call("/svc", "Ping")
                .interface("org.example.Svc")
                .sender(":1.1")
                .destination(serial_dest.to_owned())
        };
        put(
            0,
            MessageBuilder::signal(
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "NameOwnerChanged",
            )
            .sender("org.freedesktop.DBus")
            .body(vec![
                Value::String("org.example.Svc".into()),
                Value::String("".into()),
                Value::String(":1.2".into()),
            ]),
            1,
        );
        put(10, ping("org.example.Svc"), 5);
        put(
            12,
            MessageBuilder::method_return(5)
                .sender(":1.2")
                .destination(":1.1"),
            9,
        );
        put(20, ping("org.example.Svc"), 6);
        put(
            26,
            MessageBuilder::method_return(6)
                .sender(":1.2")
                .destination(":1.1"),
            10,
        );
        put(30, ping("org.example.Svc"), 7);
        put(
            31,
            MessageBuilder::error(7, "org.example.Error.Busy")
                .sender(":1.2")
                .destination(":1.1"),
            11,
        );
        put(40, ping("org.example.Svc"), 8);
        put(
            50,
            MessageBuilder::signal("/svc", "org.example.Svc", "Changed")
                .sender(":1.2")
                .body(vec![Value::Uint32(1)]),
            12,
        );
        w.into_inner()
    }

    #[test]
    fn summaries_use_nearest_rank_percentiles() {
        let s = Summary::of((1..=100).map(f64::from).collect());
        assert_eq!(
            (s.count, s.min, s.p50, s.p99, s.max),
            (100, 1.0, 50.0, 99.0, 100.0)
        );
        assert_eq!(s.mean, 50.5);
        assert_eq!(Summary::of(vec![]), Summary::default());
        assert_eq!(Summary::of(vec![3.0]).p99, 3.0);
    }

    #[test]
    fn a_capture_is_counted_paired_and_named() {
        let a = load(&sample_capture()[..]).unwrap();
        assert_eq!(a.entries.len(), 9);
        assert_eq!(a.undecodable, 0);
        assert_eq!(a.duration(), Duration::from_millis(50));
        let freq = a.frequencies();
        assert_eq!(freq[0].kind, "method_call");
        assert_eq!(freq[0].member, "org.example.Svc.Ping");
        assert_eq!(freq[0].count, 4);
        let returns = freq.iter().find(|r| r.kind == "method_return").unwrap();
        assert_eq!(
            (returns.member.as_str(), returns.count),
            ("org.example.Svc.Ping", 2)
        );
        let errors = freq.iter().find(|r| r.kind == "error").unwrap();
        assert_eq!(
            (errors.member.as_str(), errors.count),
            ("org.example.Error.Busy", 1)
        );
        let times = a.method_times();
        assert_eq!(times.len(), 1);
        let ping = &times[0];
        assert_eq!(
            (ping.durations.count, ping.errors, ping.unanswered),
            (3, 1, 1)
        );
        assert!((ping.durations.max - 0.006).abs() < 1e-9);
        assert!((ping.durations.p50 - 0.002).abs() < 1e-9);
        assert!((ping.durations.total - 0.009).abs() < 1e-9);
        let talkers = a.talkers();
        assert_eq!(talkers[0].sender, ":1.1");
        assert_eq!(talkers[0].messages, 4);
        assert_eq!(talkers[1].sender, ":1.2");
        assert_eq!(talkers[1].names, ["org.example.Svc"]);
        let sizes = a.sizes();
        let all = &sizes.last().unwrap().1;
        assert_eq!(all.count, 9);
        let total: usize = a.entries.iter().map(|e| e.size).sum();
        assert_eq!(all.total as usize, total);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        assert!(load(&b"not a capture at all...."[..])
            .unwrap_err()
            .contains("not a pcap"));
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write(at(0), b"garbage").unwrap();
        let a = load(&w.into_inner()[..]).unwrap();
        assert_eq!((a.entries.len(), a.undecodable), (0, 1));
    }
}

/// The statistics tables as text cells, shared by `quickbus stats` (plain
/// text) and `quickbus report` (HTML): the same columns in both.
pub mod cells {
    use super::{MemberCount, MethodTimes, Summary};

    pub const FREQUENCY_HEADERS: &[&str] = &["count", "bytes", "type", "member"];
    pub const DURATION_HEADERS: &[&str] = &[
        "calls",
        "total",
        "mean",
        "p50",
        "p99",
        "max",
        "errors",
        "unanswered",
        "method",
    ];
    pub const SIZE_HEADERS: &[&str] = &["count", "smallest", "mean", "largest", "type"];

    /// Seconds as milliseconds with three decimals.
    pub fn ms(seconds: f64) -> String {
        format!("{:.3}", seconds * 1000.0)
    }

    pub fn frequency_rows(rows: Vec<MemberCount>) -> Vec<Vec<String>> {
        rows.into_iter()
            .map(|r| {
                vec![
                    r.count.to_string(),
                    r.bytes.to_string(),
                    r.kind.to_owned(),
                    r.member,
                ]
            })
            .collect()
    }

    pub fn duration_rows(rows: Vec<MethodTimes>) -> Vec<Vec<String>> {
        rows.into_iter()
            .map(|r| {
                let d = &r.durations;
                vec![
                    d.count.to_string(),
                    ms(d.total),
                    ms(d.mean),
                    ms(d.p50),
                    ms(d.p99),
                    ms(d.max),
                    r.errors.to_string(),
                    r.unanswered.to_string(),
                    r.member,
                ]
            })
            .collect()
    }

    pub fn size_rows(sizes: Vec<(&'static str, Summary)>) -> Vec<Vec<String>> {
        sizes
            .into_iter()
            .map(|(kind, s)| {
                vec![
                    s.count.to_string(),
                    format!("{}", s.min),
                    format!("{:.1}", s.mean),
                    format!("{}", s.max),
                    kind.to_owned(),
                ]
            })
            .collect()
    }
}
