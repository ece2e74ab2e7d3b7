//! The single-threaded oracle of tests/order_oracle.rs: it replays a
//! monitor's record of every message the bus routed, in the order the bus
//! routed them, and says what each receiver must have received.

use std::collections::HashSet;

use quickbus_client::{Message, MessageType, Value};

/// The bus driver, sender of NameOwnerChanged, NameAcquired and NameLost.
pub const DRIVER: &str = "org.freedesktop.DBus";

/// One message, as the monitor recorded it or a receiver got it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub kind: MessageType,
    pub sender: String,
    pub serial: u32,
    pub destination: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub reply_serial: Option<u32>,
    /// The top-level arguments, `Some` for strings: for `arg0` matching,
    /// and to name the driver's messages.
    pub string_args: Vec<Option<String>>,
}

impl Seen {
    pub fn of(message: &Message) -> Seen {
        let values = message.body_values().unwrap_or_else(|e| {
            panic!(
                "a body that does not decode from {:?}: {e}",
                message.sender()
            )
        });
        Seen {
            kind: message.msg_type(),
            sender: message.sender().unwrap_or_default().to_owned(),
            serial: message.serial(),
            destination: message.destination().map(str::to_owned),
            interface: message.interface().map(str::to_owned),
            member: message.member().map(str::to_owned),
            reply_serial: message.reply_serial(),
            string_args: values
                .into_iter()
                .map(|value| match value {
                    Value::String(s) => Some(s),
                    _ => None,
                })
                .collect(),
        }
    }

    /// Names the message the same way in the monitor's record and in
    /// every receiver's list: a client's message by its sender and serial.
    /// The driver's by member and arguments instead, since a daemon may
    /// stamp each copy of its broadcast with another serial.
    pub fn key(&self) -> String {
        let what = self
            .member
            .clone()
            .unwrap_or_else(|| format!("{:?}", self.kind));
        if self.sender == DRIVER {
            let args: Vec<&str> = self
                .string_args
                .iter()
                .flatten()
                .map(String::as_str)
                .collect();
            format!("{DRIVER} {what}{args:?}")
        } else {
            format!("{}#{} {what}", self.sender, self.serial)
        }
    }

    fn is_reply(&self) -> bool {
        matches!(self.kind, MessageType::MethodReturn | MessageType::Error)
    }
}

/// A signal match rule with the keys the test uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub sender: Option<String>,
    pub interface: String,
    pub member: Option<String>,
    pub arg0: Option<String>,
}

impl Rule {
    /// The rule as AddMatch takes it.
    pub fn text(&self) -> String {
        let mut text = "type='signal'".to_owned();
        if let Some(sender) = &self.sender {
            text += &format!(",sender='{sender}'");
        }
        text += &format!(",interface='{}'", self.interface);
        if let Some(member) = &self.member {
            text += &format!(",member='{member}'");
        }
        if let Some(arg0) = &self.arg0 {
            text += &format!(",arg0='{arg0}'");
        }
        text
    }

    /// Whether a broadcast (a message with no destination) matches.
    fn matches(&self, message: &Seen) -> bool {
        let wanted = |key: &Option<String>, value: Option<&str>| {
            key.as_deref().is_none_or(|want| Some(want) == value)
        };
        message.kind == MessageType::Signal
            && wanted(&self.sender, Some(&message.sender))
            && message.interface.as_deref() == Some(self.interface.as_str())
            && wanted(&self.member, message.member.as_deref())
            && wanted(
                &self.arg0,
                message.string_args.first().cloned().flatten().as_deref(),
            )
    }
}

/// What the oracle knows of one receiver.
pub struct Receiver<'a> {
    pub name: &'a str,
    /// Every rule it may add or remove (an AddMatch in the record with
    /// another rule is a mistake of the test).
    pub rules: &'a [Rule],
    /// The serials it sent: the replies to its own calls are consumed by
    /// its calls, not in the list it keeps.
    pub sent: &'a HashSet<u32>,
}

/// Replays `record` and returns what `receiver` must have got, in order:
/// every message addressed to it (but the replies to its own calls), and
/// every broadcast that matched one of its rules at that point of the
/// record, once, whatever number of its rules matched. Its rules change
/// where its AddMatch and RemoveMatch calls stand in the record.
pub fn expected<'r>(record: &'r [Seen], receiver: &Receiver) -> Vec<&'r Seen> {
    let mut active: Vec<&Rule> = Vec::new();
    let mut out = Vec::new();
    for message in record {
        if message.sender == receiver.name
            && message.kind == MessageType::MethodCall
            && message.destination.as_deref() == Some(DRIVER)
        {
            change_rules(&mut active, message, receiver);
        }
        let wanted = match message.destination.as_deref() {
            Some(to) => {
                to == receiver.name
                    && !(message.is_reply()
                        && message
                            .reply_serial
                            .is_some_and(|s| receiver.sent.contains(&s)))
            }
            None => active.iter().any(|rule| rule.matches(message)),
        };
        if wanted {
            out.push(message);
        }
    }
    out
}

fn change_rules<'a>(active: &mut Vec<&'a Rule>, call: &Seen, receiver: &Receiver<'a>) {
    let adds = match call.member.as_deref() {
        Some("AddMatch") => true,
        Some("RemoveMatch") => false,
        _ => return,
    };
    let text = call
        .string_args
        .first()
        .cloned()
        .flatten()
        .unwrap_or_default();
    let rule = receiver
        .rules
        .iter()
        .find(|rule| rule.text() == text)
        .unwrap_or_else(|| {
            panic!(
                "{} changed a rule the test does not know: {text}",
                receiver.name
            )
        });
    if adds {
        active.push(rule);
    } else if let Some(at) = active.iter().position(|r| *r == rule) {
        active.remove(at);
    }
}

/// Panics unless `got` is exactly `want`, naming `who` and the first
/// position where they differ, with the messages around it.
pub fn assert_same_list(who: &str, got: &[Seen], want: &[&Seen]) {
    let got: Vec<String> = got.iter().map(Seen::key).collect();
    let want: Vec<String> = want.iter().map(|m| m.key()).collect();
    let Some(at) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) else {
        return;
    };
    let around = |list: &[String]| {
        let from = at.saturating_sub(3);
        let to = (at + 4).min(list.len());
        list.get(from..to)
            .map(|part| part.join("\n      "))
            .unwrap_or_default()
    };
    panic!(
        "{who} did not get what the bus's order says: first difference at position {at} \
         (received {}, expected {})\n  received[{at}] = {}\n  expected[{at}] = {}\n  \
         received from {}:\n      {}\n  expected from {}:\n      {}",
        got.len(),
        want.len(),
        got.get(at).map_or("(nothing)", String::as_str),
        want.get(at).map_or("(nothing)", String::as_str),
        at.saturating_sub(3),
        around(&got),
        at.saturating_sub(3),
        around(&want),
    );
}

/// The serials `sender` used, in the order the record has them.
pub fn serials_of(record: &[Seen], sender: &str) -> Vec<u32> {
    record
        .iter()
        .filter(|m| m.sender == sender)
        .map(|m| m.serial)
        .collect()
}

/// Panics unless every client's serials increase along the record: the
/// bus routed each connection's messages in the order it sent them.
pub fn assert_per_sender_order(record: &[Seen]) {
    let senders: HashSet<&str> = record
        .iter()
        .map(|m| m.sender.as_str())
        .filter(|s| *s != DRIVER)
        .collect();
    for sender in senders {
        let serials = serials_of(record, sender);
        if let Some(pair) = serials.windows(2).find(|pair| pair[0] >= pair[1]) {
            panic!(
                "the bus routed {sender}'s serial {} after its serial {}: not in the order sent",
                pair[1], pair[0]
            );
        }
    }
}
