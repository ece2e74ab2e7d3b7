//! The single-threaded oracle of tests/order_oracle.rs: it replays a
//! monitor's record of every message the bus routed, in the order the bus
//! routed them, and says what each client must have received.

use std::collections::HashSet;

use quickbus_client::{Message, MessageType, Value};

/// The bus driver, sender of NameOwnerChanged, NameAcquired and NameLost.
pub const DRIVER: &str = "org.freedesktop.DBus";

/// One message, as the monitor recorded it or a client got it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub kind: MessageType,
    pub sender: String,
    pub serial: u32,
    pub destination: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub reply_serial: Option<u32>,
    pub args: Vec<Value>,
}

impl Seen {
    pub fn of(message: &Message) -> Seen {
        Seen {
            kind: message.msg_type(),
            sender: message.sender().unwrap_or_default().to_owned(),
            serial: message.serial(),
            destination: message.destination().map(str::to_owned),
            interface: message.interface().map(str::to_owned),
            member: message.member().map(str::to_owned),
            reply_serial: message.reply_serial(),
            args: message.body_values().unwrap_or_else(|e| {
                panic!(
                    "a body that does not decode from {:?}: {e}",
                    message.sender()
                )
            }),
        }
    }

    /// The first argument, when it is a string (what `arg0` matches).
    pub fn arg0(&self) -> Option<&str> {
        match self.args.first() {
            Some(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// Names the message the same way in the monitor's record and in
    /// every client's list: a client's message by its sender and serial;
    /// the driver's by what it says and to whom, since a daemon may stamp
    /// each copy of its broadcast with another serial.
    pub fn key(&self) -> String {
        let what = match (&self.member, self.reply_serial) {
            (Some(member), _) => member.clone(),
            (None, Some(serial)) => format!("{:?} to #{serial}", self.kind),
            (None, None) => format!("{:?}", self.kind),
        };
        if self.sender == DRIVER {
            let to = self.destination.as_deref().unwrap_or("all");
            format!("{DRIVER} {what} {:?} for {to}", self.args)
        } else {
            format!("{}#{} {what}", self.sender, self.serial)
        }
    }

    /// The driver's reply to Hello, which connecting consumes.
    fn answers_hello_of(&self, name: &str) -> bool {
        self.sender == DRIVER
            && self.reply_serial == Some(1)
            && self.destination.as_deref() == Some(name)
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
            && wanted(&self.arg0, message.arg0())
    }
}

/// What the oracle knows of one client.
pub struct Client<'a> {
    pub name: &'a str,
    /// Every rule it may add or remove (an AddMatch in the record with
    /// another rule is a mistake of the test).
    pub rules: &'a [Rule],
}

/// Replays `record` and returns what `client` must have got, in order:
/// every message addressed to it (but the reply to its Hello), and every
/// broadcast that matched one of its rules at that point of the record,
/// once, whatever number of its rules matched. Its rules change where its
/// AddMatch and RemoveMatch calls stand in the record.
pub fn expected<'r>(record: &'r [Seen], client: &Client) -> Vec<&'r Seen> {
    let mut active: Vec<&Rule> = Vec::new();
    let mut out = Vec::new();
    for message in record {
        if message.sender == client.name
            && message.kind == MessageType::MethodCall
            && message.destination.as_deref() == Some(DRIVER)
        {
            change_rules(&mut active, message, client);
        }
        let wanted = match message.destination.as_deref() {
            Some(to) => to == client.name && !message.answers_hello_of(client.name),
            None => active.iter().any(|rule| rule.matches(message)),
        };
        if wanted {
            out.push(message);
        }
    }
    out
}

fn change_rules<'a>(active: &mut Vec<&'a Rule>, call: &Seen, client: &Client<'a>) {
    let adds = match call.member.as_deref() {
        Some("AddMatch") => true,
        Some("RemoveMatch") => false,
        _ => return,
    };
    let text = call.arg0().unwrap_or_default();
    let rule = client
        .rules
        .iter()
        .find(|rule| rule.text() == text)
        .unwrap_or_else(|| {
            panic!(
                "{} changed a rule the test does not know: {text}",
                client.name
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
