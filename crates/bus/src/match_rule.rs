//! Match rules (D-Bus specification, "Match Rules"): parsing with
//! dbus-daemon's exact grammar, limits and error texts (the text is what an
//! `AddMatch` caller reads), the canonical text of a rule, and matching one
//! message.
//!
//! Parsing quirks kept on purpose because clients can observe them (each was
//! checked against dbus-daemon 1.14):
//! - whitespace is skipped before a key and between a key and `=`, never
//!   in a value: `type= 'signal'` has the value `" signal"` (invalid);
//! - outside quotes `\'` is a literal quote and any other `\x` is kept as is;
//! - only the first 16 `key=value` tokens are read, the rest of the text is
//!   ignored (so is everything after an empty key such as `=x`);
//! - `argN` numbers are read like C `strtoul(.., 0)`: `arg0x1` is arg 1;
//! - `eavesdrop` may repeat (the last one wins), other keys may not.
//!
//! Owns: one rule's grammar and matching. May touch: nothing else; who
//! owns a name comes in through [`NameOwner`].

use std::cell::OnceCell;
use std::fmt;

use quickbus_wire::{names, Message, MessageType, StrArg, StrKind, BUS_NAME};

/// Longest rule text dbus-daemon accepts (`DBUS_MAXIMUM_MATCH_RULE_LENGTH`).
pub const MAX_RULE_LENGTH: usize = 1024;
/// Highest argument index a rule may name (`DBUS_MAXIMUM_MATCH_RULE_ARG_NUMBER`).
pub const MAX_ARG_INDEX: usize = 63;
/// dbus-daemon reads at most this many tokens and ignores the rest.
const MAX_TOKENS: usize = 16;

const ERROR_MATCH_RULE_INVALID: &str = "org.freedesktop.DBus.Error.MatchRuleInvalid";
const ERROR_LIMITS_EXCEEDED: &str = "org.freedesktop.DBus.Error.LimitsExceeded";

/// Why a rule text was refused: a D-Bus error name and dbus-daemon's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchRuleError {
    name: &'static str,
    message: String,
}

impl MatchRuleError {
    fn invalid(message: impl Into<String>) -> MatchRuleError {
        MatchRuleError {
            name: ERROR_MATCH_RULE_INVALID,
            message: message.into(),
        }
    }

    /// `org.freedesktop.DBus.Error.MatchRuleInvalid`, or `...LimitsExceeded`
    /// for a text over [`MAX_RULE_LENGTH`] (as dbus-daemon answers).
    pub fn dbus_error_name(&self) -> &'static str {
        self.name
    }

    /// The error message exactly as dbus-daemon words it (some of its
    /// messages end with a newline; so do these).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for MatchRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for MatchRuleError {}

/// `path` or `path_namespace`: a rule has at most one of them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PathMatch {
    /// `path='/a/b'`: the message path equals this.
    Exact(String),
    /// `path_namespace='/a'`: the path is `/a` or below it; `/` matches all.
    Namespace(String),
}

/// How an `argN...` key compares with the message's argument N.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum ArgKind {
    /// `argN`: a string argument equal to the value.
    Exact,
    /// `argNpath`: a string or object path argument, path-prefix rules.
    Path,
    /// `arg0namespace`: a string argument that is the value or a bus name below it.
    Namespace,
}

/// One `argN...` condition.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ArgMatch {
    pub index: u8,
    pub kind: ArgKind,
    pub value: String,
}

/// A parsed match rule. Equality is on the parsed rule (what `RemoveMatch`
/// compares), not on its text: `type='signal'` equals `type=signal`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct MatchRule {
    msg_type: Option<MessageType>,
    // Boxed: a million installed rules should not carry spare capacity.
    sender: Option<Box<str>>,
    interface: Option<Box<str>>,
    member: Option<Box<str>>,
    path: Option<PathMatch>,
    destination: Option<Box<str>>,
    /// Sorted by index, at most one per index.
    args: Vec<ArgMatch>,
    eavesdrop: bool,
}

/// A connection (or the bus driver) as match rules see it: the names it is
/// the primary owner of. Used for the `sender` and `destination` keys, which
/// match a unique name or any well-known name the party currently owns.
pub trait NameOwner {
    /// Name number `index` this party is primary owner of: its unique name
    /// at 0, then its well-known names; `None` past the end.
    fn name(&self, index: usize) -> Option<&str>;

    /// Is this party the primary owner of `name` (its unique name counts)?
    /// The default scans [`NameOwner::name`]; override it with a lookup.
    fn owns(&self, name: &str) -> bool {
        (0..).map_while(|i| self.name(i)).any(|n| n == name)
    }

    /// At least as many as [`NameOwner::name`] yields, known without
    /// listing them, so the match index can tell when listing every name
    /// of a party owning thousands costs more than scanning a few rules.
    /// The default counts; override it with what is at hand.
    fn name_count_bound(&self) -> usize {
        (0..).map_while(|i| self.name(i)).count()
    }
}

/// The bus driver as a sender or recipient: it owns only `org.freedesktop.DBus`.
#[derive(Clone, Copy, Debug, Default)]
pub struct BusDriver;

impl NameOwner for BusDriver {
    fn name(&self, index: usize) -> Option<&str> {
        (index == 0).then_some(BUS_NAME)
    }

    fn name_count_bound(&self) -> usize {
        1
    }
}

/// A connection given by its unique name and the well-known names it is
/// primary owner of.
#[derive(Clone, Copy, Debug)]
pub struct OwnedNames<'a, S: AsRef<str>> {
    pub unique: &'a str,
    pub well_known: &'a [S],
}

impl<S: AsRef<str>> NameOwner for OwnedNames<'_, S> {
    fn name(&self, index: usize) -> Option<&str> {
        match index {
            0 => Some(self.unique),
            i => self.well_known.get(i - 1).map(AsRef::as_ref),
        }
    }

    fn name_count_bound(&self) -> usize {
        1 + self.well_known.len()
    }
}

/// One message being routed, as every rule checks it. The string arguments
/// are decoded at most once, and only if a rule asks for them.
pub struct MatchInput<'a> {
    msg: &'a Message,
    sender: &'a dyn NameOwner,
    recipient: Option<&'a dyn NameOwner>,
    first_arg: OnceCell<Option<StrArg<'a>>>,
    all_args: OnceCell<Vec<Option<StrArg<'a>>>>,
}

impl<'a> MatchInput<'a> {
    /// `sender`: the connection the message came from ([`BusDriver`] for the
    /// bus's own messages), never the untrusted SENDER header field.
    /// `recipient`: the connection the message is addressed to, `None` when
    /// it has no destination or is not (yet) owned by a connection (to the
    /// driver, or waiting for activation): then a rule's `destination` is
    /// compared with the DESTINATION header, as dbus-daemon does.
    pub fn new(
        msg: &'a Message,
        sender: &'a dyn NameOwner,
        recipient: Option<&'a dyn NameOwner>,
    ) -> MatchInput<'a> {
        MatchInput {
            msg,
            sender,
            recipient,
            first_arg: OnceCell::new(),
            all_args: OnceCell::new(),
        }
    }

    pub fn message(&self) -> &'a Message {
        self.msg
    }

    pub fn sender(&self) -> &'a dyn NameOwner {
        self.sender
    }

    pub fn recipient(&self) -> Option<&'a dyn NameOwner> {
        self.recipient
    }

    /// Top-level argument `index` if it is a string, object path or signature.
    pub fn arg(&self, index: usize) -> Option<StrArg<'a>> {
        if index == 0 {
            // Most rules with arguments look at arg0 only: decode one.
            let msg = self.msg;
            *self
                .first_arg
                .get_or_init(|| msg.string_args(1).into_iter().next().flatten())
        } else {
            let msg = self.msg;
            self.all_args
                .get_or_init(|| msg.string_args(MAX_ARG_INDEX + 1))
                .get(index)
                .copied()
                .flatten()
        }
    }
}

impl MatchRule {
    /// Parse a rule text as dbus-daemon's `AddMatch`/`RemoveMatch` do.
    pub fn parse(text: &str) -> Result<MatchRule, MatchRuleError> {
        if text.len() > MAX_RULE_LENGTH {
            return Err(MatchRuleError {
                name: ERROR_LIMITS_EXCEEDED,
                message: format!(
                    "Match rule text is {} bytes, maximum is {MAX_RULE_LENGTH}",
                    text.len()
                ),
            });
        }
        let mut rule = MatchRule::default();
        for (key, value) in tokenize(text)? {
            rule.apply(key, value)?;
        }
        Ok(rule)
    }

    /// Set one key, refusing what dbus-daemon refuses, in its order of checks.
    fn apply(&mut self, key: &str, value: String) -> Result<(), MatchRuleError> {
        let twice =
            || MatchRuleError::invalid(format!("Key {key} specified twice in match rule\n"));
        match key {
            "type" => {
                if self.msg_type.is_some() {
                    return Err(twice());
                }
                let t = type_from_str(&value).ok_or_else(|| {
                    MatchRuleError::invalid(format!(
                        "Invalid message type ({value}) in match rule\n"
                    ))
                })?;
                self.msg_type = Some(t);
            }
            "sender" => {
                if self.sender.is_some() {
                    return Err(twice());
                }
                if !names::is_valid_match_bus_name(&value) {
                    return Err(MatchRuleError::invalid(format!(
                        "Sender name '{value}' is invalid\n"
                    )));
                }
                self.sender = Some(value.into_boxed_str());
            }
            "interface" => {
                if self.interface.is_some() {
                    return Err(twice());
                }
                if !names::is_valid_interface(&value) {
                    return Err(MatchRuleError::invalid(format!(
                        "Interface name '{value}' is invalid\n"
                    )));
                }
                self.interface = Some(value.into_boxed_str());
            }
            "member" => {
                if self.member.is_some() {
                    return Err(twice());
                }
                if !names::is_valid_member(&value) {
                    return Err(MatchRuleError::invalid(format!(
                        "Member name '{value}' is invalid\n"
                    )));
                }
                self.member = Some(value.into_boxed_str());
            }
            "path" | "path_namespace" => {
                if self.path.is_some() {
                    return Err(MatchRuleError::invalid(
                        "path or path_namespace specified twice in match rule\n",
                    ));
                }
                if !names::is_valid_object_path(&value) {
                    return Err(MatchRuleError::invalid(format!(
                        "Path '{value}' is invalid\n"
                    )));
                }
                self.path = Some(if key == "path" {
                    PathMatch::Exact(value)
                } else {
                    PathMatch::Namespace(value)
                });
            }
            "destination" => {
                if self.destination.is_some() {
                    return Err(twice());
                }
                if !names::is_valid_match_bus_name(&value) {
                    return Err(MatchRuleError::invalid(format!(
                        "Destination name '{value}' is invalid\n"
                    )));
                }
                self.destination = Some(value.into_boxed_str());
            }
            // May repeat: tools such as dbus-monitor append eavesdrop='true'
            // to a user's rule, and a later 'false' must be able to undo it.
            "eavesdrop" => match value.as_str() {
                "true" => self.eavesdrop = true,
                "false" => self.eavesdrop = false,
                _ => {
                    return Err(MatchRuleError::invalid(format!(
                        "eavesdrop='{value}' is invalid, it should be 'true' or 'false'\n"
                    )))
                }
            },
            _ if key.starts_with("arg") => self.apply_arg(key, value)?,
            _ => {
                return Err(MatchRuleError::invalid(format!(
                    "Unknown key \"{key}\" in match rule"
                )))
            }
        }
        Ok(())
    }

    fn apply_arg(&mut self, key: &str, value: String) -> Result<(), MatchRuleError> {
        if key.len() < 4 {
            return Err(MatchRuleError::invalid(format!(
                "Key '{key}' in match rule starts with 'arg' but lacks an arg number. \
                 Should be 'arg0' or 'arg7' for example.\n"
            )));
        }
        let (number, used) = parse_c_ulong(&key[3..]).ok_or_else(|| {
            MatchRuleError::invalid(format!(
                "Key '{key}' in match rule starts with 'arg' but could not parse arg number. \
                 Should be 'arg0' or 'arg7' for example.\n"
            ))
        })?;
        let kind = match &key[3 + used..] {
            "" => ArgKind::Exact,
            "path" => ArgKind::Path,
            _ if key == "arg0namespace" => {
                if !names::is_valid_bus_namespace(&value) {
                    return Err(MatchRuleError::invalid(format!(
                        "arg0namespace='{value}' is not a valid prefix of a bus name"
                    )));
                }
                ArgKind::Namespace
            }
            _ => {
                return Err(MatchRuleError::invalid(format!(
                    "Key '{key}' in match rule contains junk after argument number ({number}). \
                     Only 'arg{number}path' (for example) or 'arg0namespace' are valid"
                )))
            }
        };
        if number > MAX_ARG_INDEX as u64 {
            return Err(MatchRuleError::invalid(format!(
                "Key '{key}' in match rule has arg number {number} but the maximum is {MAX_ARG_INDEX}.\n"
            )));
        }
        let index = number as u8;
        match self.args.binary_search_by_key(&index, |a| a.index) {
            Ok(_) => Err(MatchRuleError::invalid(format!(
                "Argument {key} matched more than once in match rule\n"
            ))),
            Err(at) => {
                self.args.insert(at, ArgMatch { index, kind, value });
                Ok(())
            }
        }
    }

    pub fn msg_type(&self) -> Option<MessageType> {
        self.msg_type
    }

    pub fn sender(&self) -> Option<&str> {
        self.sender.as_deref()
    }

    pub fn interface(&self) -> Option<&str> {
        self.interface.as_deref()
    }

    pub fn member(&self) -> Option<&str> {
        self.member.as_deref()
    }

    pub fn path(&self) -> Option<&PathMatch> {
        self.path.as_ref()
    }

    pub fn destination(&self) -> Option<&str> {
        self.destination.as_deref()
    }

    /// The `argN...` conditions, sorted by argument index.
    pub fn args(&self) -> &[ArgMatch] {
        &self.args
    }

    /// The condition on argument `index`, if any.
    pub fn arg(&self, index: u8) -> Option<&ArgMatch> {
        self.args
            .binary_search_by_key(&index, |a| a.index)
            .ok()
            .map(|i| &self.args[i])
    }

    /// `eavesdrop='true'`: the owner asks for messages addressed to others
    /// too (the bus's policy decides whether it gets them).
    pub fn is_eavesdrop(&self) -> bool {
        self.eavesdrop
    }

    /// Does the message match every key of the rule? (dbus-daemon's
    /// `match_rule_matches`.) Without `eavesdrop='true'` a rule matches only
    /// broadcasts (no DESTINATION); the addressed recipient gets its message
    /// anyway, so the caller must not count it twice.
    pub fn matches(&self, input: &MatchInput<'_>) -> bool {
        let msg = input.msg;
        if self.msg_type.is_some_and(|t| t != msg.msg_type()) {
            return false;
        }
        if !field_equals(self.interface.as_deref(), msg.interface())
            || !field_equals(self.member.as_deref(), msg.member())
        {
            return false;
        }
        if let Some(sender) = &self.sender {
            if !input.sender.owns(sender) {
                return false;
            }
        }
        if !self.destination_matches(input) {
            return false;
        }
        let path_ok = match &self.path {
            None => true,
            Some(PathMatch::Exact(path)) => msg.path() == Some(path.as_str()),
            Some(PathMatch::Namespace(namespace)) => {
                msg.path().is_some_and(|p| path_in_namespace(p, namespace))
            }
        };
        if !path_ok {
            return false;
        }
        self.args.iter().all(|cond| {
            input
                .arg(cond.index as usize)
                .is_some_and(|actual| arg_matches(cond, actual))
        })
    }

    fn destination_matches(&self, input: &MatchInput<'_>) -> bool {
        let header = input.msg.destination();
        match (&self.destination, header) {
            // A rule naming a destination only ever eavesdrops: the addressed
            // recipient receives its own messages without any rule.
            (Some(_), None) => false,
            (Some(_), Some(_)) if !self.eavesdrop => false,
            (Some(wanted), Some(header)) => match input.recipient {
                Some(recipient) => recipient.owns(wanted),
                None => **wanted == *header,
            },
            (None, None) => true,
            (None, Some(_)) => self.eavesdrop,
        }
    }
}

fn field_equals(wanted: Option<&str>, actual: Option<&str>) -> bool {
    match wanted {
        None => true,
        Some(wanted) => actual == Some(wanted),
    }
}

/// `path_namespace`: the path is the namespace itself or below it.
pub(crate) fn path_in_namespace(path: &str, namespace: &str) -> bool {
    path.starts_with(namespace)
        && (namespace.len() == 1
            || path.len() == namespace.len()
            || path.as_bytes()[namespace.len()] == b'/')
}

fn arg_matches(cond: &ArgMatch, actual: StrArg<'_>) -> bool {
    match cond.kind {
        ArgKind::Exact => actual.kind == StrKind::String && actual.value == cond.value,
        ArgKind::Path => {
            matches!(actual.kind, StrKind::String | StrKind::ObjectPath)
                && arg_path_matches(actual.value, &cond.value)
        }
        ArgKind::Namespace => {
            actual.kind == StrKind::String && in_bus_namespace(actual.value, &cond.value)
        }
    }
}

/// `argNpath`: equal, or the shorter one ends with `/` and is a prefix of
/// the longer one (in either direction).
fn arg_path_matches(actual: &str, expected: &str) -> bool {
    if actual.len() < expected.len() && !actual.ends_with('/') {
        return false;
    }
    if expected.len() < actual.len() && !expected.ends_with('/') {
        return false;
    }
    let common = actual.len().min(expected.len());
    actual.as_bytes()[..common] == expected.as_bytes()[..common]
}

/// `arg0namespace`: the name is the namespace or has it as a `.`-prefix.
fn in_bus_namespace(name: &str, namespace: &str) -> bool {
    name.starts_with(namespace)
        && (name.len() == namespace.len() || name.as_bytes()[namespace.len()] == b'.')
}

fn type_from_str(text: &str) -> Option<MessageType> {
    Some(match text {
        "method_call" => MessageType::MethodCall,
        "method_return" => MessageType::MethodReturn,
        "error" => MessageType::Error,
        "signal" => MessageType::Signal,
        _ => return None,
    })
}

fn type_to_str(t: MessageType) -> &'static str {
    match t {
        MessageType::MethodCall => "method_call",
        MessageType::MethodReturn => "method_return",
        MessageType::Error => "error",
        MessageType::Signal => "signal",
    }
}

fn is_rule_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// Split a rule text into at most [`MAX_TOKENS`] `(key, unquoted value)` pairs.
fn tokenize(text: &str) -> Result<Vec<(&str, String)>, MatchRuleError> {
    // dbus-daemon walks a C string: a NUL ends the text. (Message strings
    // cannot hold one; this only keeps the parser total.)
    let text = text.split('\0').next().unwrap_or("");
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut pos = 0;
    for _ in 0..MAX_TOKENS {
        if pos >= bytes.len() {
            break;
        }
        let mut p = pos;
        while p < bytes.len() && is_rule_space(bytes[p]) {
            p += 1;
        }
        let key_start = p;
        while p < bytes.len() && bytes[p] != b'=' && !is_rule_space(bytes[p]) {
            p += 1;
        }
        let key_end = p;
        while p < bytes.len() && is_rule_space(bytes[p]) {
            p += 1;
        }
        if key_start == key_end {
            // Trailing whitespace; or a bare '=' where dbus-daemon makes no
            // progress and uses up its token budget: the rest is ignored.
            pos = p;
            continue;
        }
        if bytes.get(p) != Some(&b'=') {
            return Err(MatchRuleError::invalid(
                "Match rule has a key with no subsequent '=' character",
            ));
        }
        let (value, end) = read_value(bytes, p + 1)?;
        tokens.push((&text[key_start..key_end], value));
        pos = end;
    }
    Ok(tokens)
}

/// Read one value from `start` up to an unquoted `,` (consumed) or the end.
/// Returns the value and the position after it.
fn read_value(bytes: &[u8], start: usize) -> Result<(String, usize), MatchRuleError> {
    #[derive(PartialEq)]
    enum State {
        Plain,
        Quoted,
        Backslash,
    }
    let mut state = State::Plain;
    let mut value = Vec::new();
    let mut p = start;
    while p < bytes.len() {
        let c = bytes[p];
        p += 1;
        match state {
            State::Plain => match c {
                b'\'' => state = State::Quoted,
                b',' => break,
                b'\\' => state = State::Backslash,
                _ => value.push(c),
            },
            State::Backslash => {
                // A backslash escapes a quote only; otherwise it stays.
                if c != b'\'' {
                    value.push(b'\\');
                }
                value.push(c);
                state = State::Plain;
            }
            State::Quoted => {
                if c == b'\'' {
                    state = State::Plain;
                } else {
                    value.push(c);
                }
            }
        }
    }
    match state {
        State::Quoted => {
            return Err(MatchRuleError::invalid(
                "Unbalanced quotation marks in match rule",
            ))
        }
        State::Backslash => value.push(b'\\'),
        State::Plain => {}
    }
    // Only whole ASCII bytes are dropped or inserted, so this stays UTF-8.
    let value = String::from_utf8(value)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Ok((value, p))
}

/// C `strtoul(text, &end, 0)` on a 64-bit machine, as dbus-daemon reads
/// `argN`: optional sign, `0x` hex, leading-`0` octal, else decimal;
/// negative numbers wrap. `None` when no digit was read or on overflow.
/// Returns the number and how many bytes were used.
fn parse_c_ulong(text: &str) -> Option<(u64, usize)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let negative = match bytes.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let hex_prefix = bytes.get(i) == Some(&b'0')
        && matches!(bytes.get(i + 1), Some(b'x' | b'X'))
        && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
    let radix = if hex_prefix {
        i += 2;
        16
    } else if bytes.get(i) == Some(&b'0') {
        8
    } else {
        10
    };
    let digits_start = i;
    let mut value: u64 = 0;
    let mut overflow = false;
    while let Some(digit) = bytes.get(i).and_then(|&c| (c as char).to_digit(radix)) {
        match value
            .checked_mul(radix as u64)
            .and_then(|v| v.checked_add(digit as u64))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
        i += 1;
    }
    if i == digits_start || overflow {
        return None;
    }
    Some((
        if negative {
            value.wrapping_neg()
        } else {
            value
        },
        i,
    ))
}

/// `key='value'` with a quote inside the value written as `'\''`.
fn write_key_value(
    f: &mut fmt::Formatter<'_>,
    first: &mut bool,
    key: fmt::Arguments<'_>,
    value: &str,
) -> fmt::Result {
    if !*first {
        f.write_str(",")?;
    }
    *first = false;
    write!(f, "{key}='")?;
    let mut parts = value.split('\'');
    if let Some(part) = parts.next() {
        f.write_str(part)?;
    }
    for part in parts {
        f.write_str("'\\''")?;
        f.write_str(part)?;
    }
    f.write_str("'")
}

/// The canonical text, in dbus-daemon's key order; it parses back to an
/// equal rule.
impl fmt::Display for MatchRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        if let Some(t) = self.msg_type {
            write_key_value(f, &mut first, format_args!("type"), type_to_str(t))?;
        }
        if let Some(interface) = &self.interface {
            write_key_value(f, &mut first, format_args!("interface"), interface)?;
        }
        if let Some(member) = &self.member {
            write_key_value(f, &mut first, format_args!("member"), member)?;
        }
        match &self.path {
            Some(PathMatch::Exact(path)) => {
                write_key_value(f, &mut first, format_args!("path"), path)?
            }
            Some(PathMatch::Namespace(path)) => {
                write_key_value(f, &mut first, format_args!("path_namespace"), path)?
            }
            None => {}
        }
        if let Some(sender) = &self.sender {
            write_key_value(f, &mut first, format_args!("sender"), sender)?;
        }
        if let Some(destination) = &self.destination {
            write_key_value(f, &mut first, format_args!("destination"), destination)?;
        }
        if self.eavesdrop {
            write_key_value(f, &mut first, format_args!("eavesdrop"), "true")?;
        }
        for arg in &self.args {
            let suffix = match arg.kind {
                ArgKind::Exact => "",
                ArgKind::Path => "path",
                ArgKind::Namespace => "namespace",
            };
            write_key_value(
                f,
                &mut first,
                format_args!("arg{}{suffix}", arg.index),
                &arg.value,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use quickbus_wire::{MessageBuilder, Value};

    fn parse(text: &str) -> MatchRule {
        MatchRule::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn parse_err(text: &str) -> MatchRuleError {
        match MatchRule::parse(text) {
            Ok(rule) => panic!("{text:?} parsed as {rule:?}"),
            Err(e) => e,
        }
    }

    fn arg0(text: &str) -> String {
        parse(text).arg(0).expect("arg0").value.clone()
    }

    #[test]
    fn parses_the_spec_example() {
        let rule = parse(
            "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',\
             member='Foo',path='/bar/foo',destination=':452345.34',arg2='bar'",
        );
        assert_eq!(rule.msg_type(), Some(MessageType::Signal));
        assert_eq!(rule.sender(), Some("org.freedesktop.DBus"));
        assert_eq!(rule.interface(), Some("org.freedesktop.DBus"));
        assert_eq!(rule.member(), Some("Foo"));
        assert_eq!(rule.path(), Some(&PathMatch::Exact("/bar/foo".into())));
        assert_eq!(rule.destination(), Some(":452345.34"));
        assert_eq!(
            rule.args(),
            &[ArgMatch {
                index: 2,
                kind: ArgKind::Exact,
                value: "bar".into()
            }]
        );
        assert!(!rule.is_eavesdrop());
    }

    #[test]
    fn whitespace_before_keys_and_useless_quotes_are_accepted() {
        let plain = parse(
            "type='signal',sender='org.freedesktop.DBusSender',interface='org.freedesktop.DBusInterface',\
             member='Foo',path='/bar/foo',destination=':452345.34'",
        );
        let noisy = parse(
            "    type='signal',  \tsender='org.freedes''ktop.DBusSender',   \
             interface='org.freedesktop.DBusInterface''''', \tmember='Foo',path='/bar/foo',\
             destination=':452345.34'''''",
        );
        assert_eq!(plain, noisy);
        assert_eq!(parse("type\t='signal',\n member='a'").member(), Some("a"));
    }

    #[test]
    fn every_message_type_parses() {
        for (text, t) in [
            ("method_call", MessageType::MethodCall),
            ("method_return", MessageType::MethodReturn),
            ("error", MessageType::Error),
            ("signal", MessageType::Signal),
        ] {
            assert_eq!(parse(&format!("type='{text}'")).msg_type(), Some(t));
        }
    }

    #[test]
    fn empty_and_blank_rules_match_everything() {
        for text in [
            "",
            "   ",
            "type='signal',",
            "type='signal', ",
            "=foo",
            " =x,type='bogus'",
        ] {
            let rule = parse(text);
            assert!(
                rule.args().is_empty() && rule.member().is_none(),
                "{text:?}"
            );
        }
        assert_eq!(parse("type='signal',"), parse("type=signal"));
        assert_eq!(
            parse("type='signal',=x,type='bogus'"),
            parse("type='signal'")
        );
    }

    #[test]
    fn quoting_follows_the_spec_examples() {
        // From the spec: ', \, "," and \\ for args 0..3.
        let rule = parse(r"arg0=''\''',arg1='\',arg2=',',arg3='\\'");
        let values: Vec<&str> = rule.args().iter().map(|a| a.value.as_str()).collect();
        assert_eq!(values, ["'", "\\", ",", "\\\\"]);
        // The spec's second spelling does not work in dbus-daemon (checked
        // with 1.14.10): outside quotes `\,` is a backslash and a comma, so
        // arg1 runs on to the next separator. We do the same.
        let rule = parse(r"arg0=\',arg1=\,arg2=',',arg3=\\");
        let values: Vec<&str> = rule.args().iter().map(|a| a.value.as_str()).collect();
        assert_eq!(values, ["'", "\\,arg2=,", "\\\\"]);
        assert_eq!(
            parse_err(r"member=\,arg2=x").message(),
            "Member name '\\,arg2=x' is invalid\n"
        );
    }

    #[test]
    fn quoting_edge_cases() {
        assert_eq!(arg0(r"arg0=\"), "\\");
        assert_eq!(arg0(r"arg0='a'\"), "a\\");
        assert_eq!(arg0(r"arg0='a'\''b'"), "a'b");
        assert_eq!(arg0("arg0='x'y'z'"), "xyz");
        assert_eq!(arg0("arg0='a'b"), "ab");
        assert_eq!(arg0(r"arg0=a\,b"), "a\\,b");
        assert_eq!(arg0("arg0='a,b',arg1=c"), "a,b");
        assert_eq!(arg0("arg0=a b"), "a b");
        assert_eq!(arg0("arg0= a"), " a");
        assert_eq!(arg0("arg0=''''"), "");
        assert_eq!(arg0("arg0="), "");
        assert_eq!(arg0("arg0='é ü'"), "é ü");
        assert_eq!(arg0(r"arg0=\é"), "\\é");
        assert_eq!(arg0("arg0=a=b"), "a=b");
    }

    #[test]
    fn arg_numbers_are_read_like_strtoul() {
        let index = |text: &str| parse(text).args()[0].index;
        assert_eq!(index("arg0='a'"), 0);
        assert_eq!(index("arg63='a'"), 63);
        assert_eq!(index("arg00='a'"), 0);
        assert_eq!(index("arg010='a'"), 8);
        assert_eq!(index("arg0x1='a'"), 1);
        assert_eq!(index("arg0X3f='a'"), 63);
        assert_eq!(index("arg+1='a'"), 1);
        assert_eq!(index("arg-0='a'"), 0);
        assert_eq!(parse("arg7path='/foo'").arg(7).unwrap().kind, ArgKind::Path);
        assert_eq!(
            parse("arg0x1path='/foo'").arg(1).unwrap().kind,
            ArgKind::Path
        );
        let ns = parse("arg0namespace='foo.bar'");
        assert_eq!(ns.arg(0).unwrap().kind, ArgKind::Namespace);
    }

    #[test]
    fn only_the_first_sixteen_tokens_are_read() {
        let sixteen: Vec<String> = (0..16).map(|i| format!("arg{i}='a'")).collect();
        let rule = parse(&format!("{},foo='x'", sixteen.join(",")));
        assert_eq!(rule.args().len(), 16);
        parse(&format!("{},type='bogus'", sixteen.join(",")));
        let fifteen = &sixteen[..15];
        let e = parse_err(&format!("{},foo='x'", fifteen.join(",")));
        assert_eq!(e.message(), "Unknown key \"foo\" in match rule");
    }

    #[test]
    fn eavesdrop_may_repeat_and_the_last_wins() {
        assert!(parse("eavesdrop='true'").is_eavesdrop());
        assert!(parse("eavesdrop=true").is_eavesdrop());
        assert!(!parse("eavesdrop='true',eavesdrop='false'").is_eavesdrop());
        assert!(parse("eavesdrop='false',eavesdrop='true'").is_eavesdrop());
        assert_eq!(parse("eavesdrop='false'"), parse(""));
    }

    #[test]
    fn bus_names_are_checked_like_dbus_daemon() {
        for ok in [
            ":1.2",
            ":1",
            ":",
            ":.a",
            ":1.2-3",
            "-a.b",
            "a.b-c",
            "_a._b",
            "org.freedesktop.DBus",
        ] {
            parse(&format!("sender='{ok}'"));
            parse(&format!("destination='{ok}'"));
        }
        for bad in [
            ":a.", "a.1b", ".a.b", ":a..b", "a", "a.", "a b.c", "é.a", "",
        ] {
            parse_err(&format!("sender='{bad}'"));
        }
        let longest = format!("a.{}", "b".repeat(253));
        parse(&format!("sender='{longest}'"));
        parse_err(&format!("sender='{longest}c'"));
        parse(&format!("sender=':{}'", "1".repeat(254)));
        parse_err(&format!("sender=':{}'", "1".repeat(255)));
        for ok in ["foo", "foo.bar", ":1.2", ":", "-", "_", "a.-b"] {
            parse(&format!("arg0namespace='{ok}'"));
        }
        for bad in ["", "foo.", "foo.bar.", "a..b", "1a", ".a"] {
            parse_err(&format!("arg0namespace='{bad}'"));
        }
    }

    /// (rule, D-Bus error name suffix, message), as dbus-daemon 1.14.10 answered.
    const REFUSED: &[(&str, &str, &str)] = &[
        ("type='bogus'", "MatchRuleInvalid", "Invalid message type (bogus) in match rule\n"),
        ("type=''", "MatchRuleInvalid", "Invalid message type () in match rule\n"),
        ("type='Signal'", "MatchRuleInvalid", "Invalid message type (Signal) in match rule\n"),
        ("type = 'signal'", "MatchRuleInvalid", "Invalid message type ( signal) in match rule\n"),
        ("type='signal' ", "MatchRuleInvalid", "Invalid message type (signal ) in match rule\n"),
        ("type='signal'\t", "MatchRuleInvalid", "Invalid message type (signal\t) in match rule\n"),
        ("type='signal' ,member='a'", "MatchRuleInvalid", "Invalid message type (signal ) in match rule\n"),
        ("type='signal'=", "MatchRuleInvalid", "Invalid message type (signal=) in match rule\n"),
        ("type=='signal'", "MatchRuleInvalid", "Invalid message type (=signal) in match rule\n"),
        ("type", "MatchRuleInvalid", "Match rule has a key with no subsequent '=' character"),
        ("arg5", "MatchRuleInvalid", "Match rule has a key with no subsequent '=' character"),
        (",", "MatchRuleInvalid", "Match rule has a key with no subsequent '=' character"),
        ("type='signal',,", "MatchRuleInvalid", "Match rule has a key with no subsequent '=' character"),
        ("type='signal',  ,", "MatchRuleInvalid", "Match rule has a key with no subsequent '=' character"),
        ("arg 0='a'", "MatchRuleInvalid", "Match rule has a key with no subsequent '=' character"),
        ("type='signal", "MatchRuleInvalid", "Unbalanced quotation marks in match rule"),
        ("type='sig'nal'", "MatchRuleInvalid", "Unbalanced quotation marks in match rule"),
        ("member=a\\'b", "MatchRuleInvalid", "Member name 'a'b' is invalid\n"),
        ("member='a\\'", "MatchRuleInvalid", "Member name 'a\\' is invalid\n"),
        ("member=\tx", "MatchRuleInvalid", "Member name '\tx' is invalid\n"),
        ("member=''", "MatchRuleInvalid", "Member name '' is invalid\n"),
        ("member='a.b'", "MatchRuleInvalid", "Member name 'a.b' is invalid\n"),
        ("type='signal',type='signal'", "MatchRuleInvalid", "Key type specified twice in match rule\n"),
        ("interface='a.b',interface='a.b'", "MatchRuleInvalid", "Key interface specified twice in match rule\n"),
        ("member='a',member='a'", "MatchRuleInvalid", "Key member specified twice in match rule\n"),
        ("sender='a.b',sender='a.b'", "MatchRuleInvalid", "Key sender specified twice in match rule\n"),
        ("destination='a.b',destination='a.b'", "MatchRuleInvalid", "Key destination specified twice in match rule\n"),
        ("path='/a',path_namespace='/b'", "MatchRuleInvalid", "path or path_namespace specified twice in match rule\n"),
        ("path_namespace='/a',path='/b'", "MatchRuleInvalid", "path or path_namespace specified twice in match rule\n"),
        ("path='/a',path='/a'", "MatchRuleInvalid", "path or path_namespace specified twice in match rule\n"),
        ("eavesdrop='yes'", "MatchRuleInvalid", "eavesdrop='yes' is invalid, it should be 'true' or 'false'\n"),
        ("eavesdrop='TRUE'", "MatchRuleInvalid", "eavesdrop='TRUE' is invalid, it should be 'true' or 'false'\n"),
        ("sender='a'", "MatchRuleInvalid", "Sender name 'a' is invalid\n"),
        ("interface='a'", "MatchRuleInvalid", "Interface name 'a' is invalid\n"),
        ("path='a'", "MatchRuleInvalid", "Path 'a' is invalid\n"),
        ("path=''", "MatchRuleInvalid", "Path '' is invalid\n"),
        ("path='/a/'", "MatchRuleInvalid", "Path '/a/' is invalid\n"),
        ("path='/a//b'", "MatchRuleInvalid", "Path '/a//b' is invalid\n"),
        ("path_namespace='/a/'", "MatchRuleInvalid", "Path '/a/' is invalid\n"),
        ("path='/a-b'", "MatchRuleInvalid", "Path '/a-b' is invalid\n"),
        ("destination='x'", "MatchRuleInvalid", "Destination name 'x' is invalid\n"),
        ("foo='bar'", "MatchRuleInvalid", "Unknown key \"foo\" in match rule"),
        ("TYPE='signal'", "MatchRuleInvalid", "Unknown key \"TYPE\" in match rule"),
        ("arg='a'", "MatchRuleInvalid", "Key 'arg' in match rule starts with 'arg' but lacks an arg number. Should be 'arg0' or 'arg7' for example.\n"),
        ("argx='a'", "MatchRuleInvalid", "Key 'argx' in match rule starts with 'arg' but could not parse arg number. Should be 'arg0' or 'arg7' for example.\n"),
        ("arg99999999999999999999999='a'", "MatchRuleInvalid", "Key 'arg99999999999999999999999' in match rule starts with 'arg' but could not parse arg number. Should be 'arg0' or 'arg7' for example.\n"),
        ("arg-1='a'", "MatchRuleInvalid", "Key 'arg-1' in match rule has arg number 18446744073709551615 but the maximum is 63.\n"),
        ("arg64='a'", "MatchRuleInvalid", "Key 'arg64' in match rule has arg number 64 but the maximum is 63.\n"),
        ("arg64path='a'", "MatchRuleInvalid", "Key 'arg64path' in match rule has arg number 64 but the maximum is 63.\n"),
        ("arg0='a',arg0='b'", "MatchRuleInvalid", "Argument arg0 matched more than once in match rule\n"),
        ("arg0='a',arg0path='b'", "MatchRuleInvalid", "Argument arg0path matched more than once in match rule\n"),
        ("arg0='',arg0path=''", "MatchRuleInvalid", "Argument arg0path matched more than once in match rule\n"),
        ("arg0namespace='a',arg0='b'", "MatchRuleInvalid", "Argument arg0 matched more than once in match rule\n"),
        ("arg0='a',arg0namespace='b'", "MatchRuleInvalid", "Argument arg0namespace matched more than once in match rule\n"),
        ("arg1namespace='a'", "MatchRuleInvalid", "Key 'arg1namespace' in match rule contains junk after argument number (1). Only 'arg1path' (for example) or 'arg0namespace' are valid"),
        ("arg00namespace='a'", "MatchRuleInvalid", "Key 'arg00namespace' in match rule contains junk after argument number (0). Only 'arg0path' (for example) or 'arg0namespace' are valid"),
        ("arg0junk='a'", "MatchRuleInvalid", "Key 'arg0junk' in match rule contains junk after argument number (0). Only 'arg0path' (for example) or 'arg0namespace' are valid"),
        ("arg0x='a'", "MatchRuleInvalid", "Key 'arg0x' in match rule contains junk after argument number (0). Only 'arg0path' (for example) or 'arg0namespace' are valid"),
        ("arg08='a'", "MatchRuleInvalid", "Key 'arg08' in match rule contains junk after argument number (0). Only 'arg0path' (for example) or 'arg0namespace' are valid"),
        ("arg0namespace=''", "MatchRuleInvalid", "arg0namespace='' is not a valid prefix of a bus name"),
        ("arg0namespace='foo.'", "MatchRuleInvalid", "arg0namespace='foo.' is not a valid prefix of a bus name"),
        ("arg0namespace='1a'", "MatchRuleInvalid", "arg0namespace='1a' is not a valid prefix of a bus name"),
    ];

    #[test]
    fn refusals_match_dbus_daemon_word_for_word() {
        for (text, name, message) in REFUSED {
            let e = parse_err(text);
            assert_eq!(
                e.dbus_error_name(),
                format!("org.freedesktop.DBus.Error.{name}"),
                "{text:?}"
            );
            assert_eq!(e.message(), *message, "{text:?}");
            assert_eq!(e.to_string(), *message);
        }
    }

    #[test]
    fn rule_length_is_limited_to_1024_bytes() {
        let e = parse_err(&"x".repeat(1024));
        assert_eq!(
            e.dbus_error_name(),
            "org.freedesktop.DBus.Error.MatchRuleInvalid"
        );
        let e = parse_err(&"x".repeat(1025));
        assert_eq!(
            e.dbus_error_name(),
            "org.freedesktop.DBus.Error.LimitsExceeded"
        );
        assert_eq!(
            e.message(),
            "Match rule text is 1025 bytes, maximum is 1024"
        );
        let long_arg = format!("type='signal',arg0='{}'", "a".repeat(1024 - 21));
        assert_eq!(long_arg.len(), 1024);
        assert_eq!(arg0(&long_arg).len(), 1003);
        // Bytes, not characters.
        let e = parse_err(&format!("arg0='{}'", "é".repeat(510)));
        assert_eq!(
            e.message(),
            "Match rule text is 1027 bytes, maximum is 1024"
        );
    }

    #[test]
    fn equality_is_on_the_parsed_rule() {
        assert_eq!(parse("type='signal'"), parse("type=signal"));
        assert_eq!(parse("type='signal'"), parse(" type ='signal'"));
        assert_eq!(
            parse("arg1='a',arg0='b',member='M'"),
            parse("member=M,arg0=b,arg1=a")
        );
        assert_ne!(parse("path='/a'"), parse("path_namespace='/a'"));
        assert_ne!(parse("arg0='/a'"), parse("arg0path='/a'"));
        assert_ne!(parse("eavesdrop='true'"), parse(""));
        assert_ne!(parse("sender=':1.1'"), parse("destination=':1.1'"));
    }

    #[test]
    fn canonical_text_uses_dbus_daemon_key_order_and_escapes_quotes() {
        let rule = parse(
            "arg2path='/a/',arg0='it''s',eavesdrop=true,destination=:1.9,sender='org.S.s',\
             path_namespace='/p',member=M,interface=org.I.i,type=signal",
        );
        assert_eq!(
            rule.to_string(),
            "type='signal',interface='org.I.i',member='M',path_namespace='/p',sender='org.S.s',\
             destination=':1.9',eavesdrop='true',arg0='its',arg2path='/a/'"
        );
        let quoted = parse(r"arg0=\'a\'b\',arg1=x");
        assert_eq!(quoted.to_string(), r"arg0=''\''a'\''b'\''',arg1='x'");
        assert_eq!(parse(&quoted.to_string()), quoted);
        assert_eq!(parse("arg0namespace=x").to_string(), "arg0namespace='x'");
        assert_eq!(parse("path=/x").to_string(), "path='/x'");
        assert_eq!(parse("").to_string(), "");
    }

    fn arb_rule_text() -> impl Strategy<Value = String> {
        let value = "[a-z/'\\\\, =.]{0,8}";
        let key = prop_oneof![
            Just("type=signal".to_string()),
            Just("type=method_call".to_string()),
            "[a-z]{1,3}\\.[a-z]{1,3}".prop_map(|n| format!("sender={n}")),
            ":[0-9]\\.[0-9]{1,2}".prop_map(|n| format!("destination='{n}'")),
            "[a-z]{1,3}\\.[a-z]{1,3}".prop_map(|n| format!("interface={n}")),
            "[A-Za-z]{1,5}".prop_map(|n| format!("member={n}")),
            "(/[a-z]{1,3}){0,3}"
                .prop_map(|p| format!("path={}", if p.is_empty() { "/".into() } else { p })),
            (0u8..64, value).prop_map(|(i, v)| format!("arg{i}='{}'", v.replace('\'', r"'\''"))),
            (0u8..64, value)
                .prop_map(|(i, v)| format!("arg{i}path='{}'", v.replace('\'', r"'\''"))),
            Just("eavesdrop=true".to_string()),
        ];
        prop::collection::vec(key, 0..8).prop_map(|keys| keys.join(","))
    }

    proptest! {
        #[test]
        fn canonical_text_parses_back_to_an_equal_rule(text in arb_rule_text()) {
            if let Ok(rule) = MatchRule::parse(&text) {
                let canonical = rule.to_string();
                prop_assert_eq!(MatchRule::parse(&canonical), Ok(rule.clone()));
                // Canonical text is a fixed point.
                prop_assert_eq!(parse(&canonical).to_string(), canonical);
            }
        }

        #[test]
        fn parse_never_panics(text in "[a-z0-9_=,'\\\\ \t./:-]{0,64}") {
            let _ = MatchRule::parse(&text);
        }

        #[test]
        fn arg_numbers_in_decimal_round_trip(i in 0usize..=63) {
            let rule = parse(&format!("arg{i}='v'"));
            prop_assert_eq!(rule.args()[0].index as usize, i);
        }
    }

    // ---- matching ----

    fn message(builder: MessageBuilder) -> Message {
        Message::parse(builder.build(7).expect("build")).expect("parse")
    }

    fn signal(path: &str, interface: &str, member: &str, body: Vec<Value>) -> Message {
        message(MessageBuilder::signal(path, interface, member).body(body))
    }

    fn s(v: &str) -> Value {
        Value::String(v.into())
    }

    fn o(v: &str) -> Value {
        Value::ObjectPath(v.into())
    }

    const PLAIN: OwnedNames<'static, &'static str> = OwnedNames {
        unique: ":1.5",
        well_known: &["org.example.Owned", "org.example.Second"],
    };

    fn matches(rule: &str, msg: &Message) -> bool {
        parse(rule).matches(&MatchInput::new(msg, &PLAIN, None))
    }

    #[test]
    fn type_interface_member_and_path_must_all_match() {
        let msg = signal("/a/b", "org.example.I", "Changed", vec![]);
        for yes in [
            "",
            "type='signal'",
            "interface='org.example.I'",
            "member='Changed'",
            "path='/a/b'",
            "type='signal',interface='org.example.I',member='Changed',path='/a/b'",
        ] {
            assert!(matches(yes, &msg), "{yes}");
        }
        for no in [
            "type='method_call'",
            "type='error'",
            "interface='org.example.J'",
            "member='Changed2'",
            "path='/a'",
            "path='/a/b/c'",
            "type='signal',interface='org.example.I',member='Other'",
        ] {
            assert!(!matches(no, &msg), "{no}");
        }
        // A header the message lacks never matches a rule that names it.
        let call = message(MessageBuilder::method_call("/a/b", "Changed"));
        assert!(matches("member='Changed'", &call));
        assert!(!matches("interface='org.example.I'", &call));
        let ret = message(MessageBuilder::method_return(3));
        assert!(matches("type='method_return'", &ret));
        assert!(!matches("path_namespace='/'", &ret));
        assert!(!matches("member='Changed'", &ret));
    }

    #[test]
    fn sender_matches_the_unique_name_or_an_owned_well_known_name() {
        let msg = signal("/", "org.example.I", "M", vec![]);
        assert!(matches("sender=':1.5'", &msg));
        assert!(matches("sender='org.example.Owned'", &msg));
        assert!(matches("sender='org.example.Second'", &msg));
        assert!(!matches("sender=':1.6'", &msg));
        assert!(!matches("sender='org.example.Other'", &msg));
        assert!(!matches("sender='org.freedesktop.DBus'", &msg));
        // The SENDER header is not trusted: only the given party counts.
        let forged = message(MessageBuilder::signal("/", "org.example.I", "M").sender(":1.9"));
        assert!(!matches("sender=':1.9'", &forged));
        let from_bus = |rule: &str| parse(rule).matches(&MatchInput::new(&msg, &BusDriver, None));
        assert!(from_bus("sender='org.freedesktop.DBus'"));
        assert!(!from_bus("sender=':1.5'"));
    }

    #[test]
    fn without_eavesdrop_only_broadcasts_match() {
        let unicast =
            message(MessageBuilder::signal("/", "org.example.I", "M").destination(":1.7"));
        let call = message(MessageBuilder::method_call("/", "M").destination("org.example.Svc"));
        for msg in [&unicast, &call] {
            assert!(!matches("", msg));
            assert!(!matches("member='M'", msg));
            assert!(matches("eavesdrop='true'", msg));
            assert!(matches("member='M',eavesdrop='true'", msg));
            assert!(!matches("member='M',eavesdrop='false'", msg));
        }
        let broadcast = signal("/", "org.example.I", "M", vec![]);
        assert!(matches("eavesdrop='true'", &broadcast));
        assert!(matches("", &broadcast));
    }

    #[test]
    fn destination_matches_only_eavesdroppers_through_the_recipients_names() {
        let to_name = message(MessageBuilder::method_call("/", "M").destination("org.example.Svc"));
        let recipient = OwnedNames {
            unique: ":1.8",
            well_known: &["org.example.Svc".to_string()],
        };
        let check = |rule: &str, recipient: Option<&dyn NameOwner>| {
            parse(rule).matches(&MatchInput::new(&to_name, &PLAIN, recipient))
        };
        // Addressed by well-known name, matched by the owner's unique name too.
        assert!(check("destination=':1.8',eavesdrop=true", Some(&recipient)));
        assert!(check(
            "destination='org.example.Svc',eavesdrop=true",
            Some(&recipient)
        ));
        assert!(!check(
            "destination=':1.9',eavesdrop=true",
            Some(&recipient)
        ));
        // Not eavesdropping: the recipient gets its messages anyway, no match.
        assert!(!check("destination=':1.8'", Some(&recipient)));
        // No recipient connection (driver, activation): the header decides.
        assert!(check("destination='org.example.Svc',eavesdrop=true", None));
        assert!(!check("destination=':1.8',eavesdrop=true", None));
        let broadcast = signal("/", "org.example.I", "M", vec![]);
        assert!(!parse("destination=':1.8',eavesdrop=true")
            .matches(&MatchInput::new(&broadcast, &PLAIN, None)));
        let to_bus = message(
            MessageBuilder::method_call("/org/freedesktop/DBus", "Hello")
                .destination("org.freedesktop.DBus"),
        );
        let rule = parse("destination='org.freedesktop.DBus',eavesdrop=true");
        assert!(rule.matches(&MatchInput::new(&to_bus, &PLAIN, None)));
        assert!(rule.matches(&MatchInput::new(&to_bus, &PLAIN, Some(&BusDriver))));
    }

    #[test]
    fn path_namespace_follows_the_spec_example() {
        let at = |path: &str| signal(path, "org.example.I", "M", vec![]);
        let rule = "path_namespace='/com/example/foo'";
        assert!(matches(rule, &at("/com/example/foo")));
        assert!(matches(rule, &at("/com/example/foo/bar")));
        assert!(matches(rule, &at("/com/example/foo/bar/baz")));
        assert!(!matches(rule, &at("/com/example/foobar")));
        assert!(!matches(rule, &at("/com/example")));
        assert!(!matches(rule, &at("/")));
        for path in ["/", "/a", "/com/example/foobar"] {
            assert!(matches("path_namespace='/'", &at(path)), "{path}");
        }
    }

    #[test]
    fn arg_matches_only_string_arguments_exactly() {
        let msg = signal(
            "/",
            "org.example.I",
            "M",
            vec![
                s("foo"),
                Value::Uint32(3),
                o("/foo"),
                s(""),
                Value::Signature("s".into()),
            ],
        );
        assert!(matches("arg0='foo'", &msg));
        assert!(!matches("arg0='fo'", &msg));
        assert!(!matches("arg0='foo2'", &msg));
        assert!(!matches("arg1='3'", &msg));
        assert!(
            !matches("arg2='/foo'", &msg),
            "object paths are not strings"
        );
        assert!(matches("arg3=''", &msg));
        assert!(!matches("arg4='s'", &msg), "signatures are not strings");
        assert!(!matches("arg5=''", &msg), "missing argument");
        assert!(!matches("arg63='x'", &msg));
        assert!(matches("arg0='foo',arg3=''", &msg));
        assert!(!matches("arg0='foo',arg3='x'", &msg));
        let many: Vec<Value> = (0..64).map(|i| s(&format!("v{i}"))).collect();
        let msg = signal("/", "org.example.I", "M", many);
        assert!(matches("arg63='v63',arg0='v0',arg31='v31'", &msg));
    }

    #[test]
    fn arg_path_follows_the_spec_examples() {
        let rule = "arg0path='/aa/bb/'";
        let with = |v: Value| signal("/", "org.example.I", "M", vec![v]);
        for yes in ["/", "/aa/", "/aa/bb/", "/aa/bb/cc/", "/aa/bb/cc"] {
            assert!(matches(rule, &with(s(yes))), "{yes}");
        }
        for no in ["/aa/b", "/aa", "/aa/bb", "", "aa/bb/"] {
            assert!(!matches(rule, &with(s(no))), "{no:?}");
        }
        // Object paths too, but not signatures.
        assert!(matches("arg0path='/aa/'", &with(o("/aa/bb"))));
        assert!(matches("arg0path='/aa/bb/cc'", &with(o("/"))));
        assert!(!matches(
            "arg0path='s'",
            &with(Value::Signature("s".into()))
        ));
        // Without a trailing slash only equality counts.
        assert!(matches("arg0path='/aa'", &with(s("/aa"))));
        assert!(!matches("arg0path='/aa'", &with(s("/aa/bb"))));
        assert!(!matches("arg0path=''", &with(s("/"))));
        assert!(matches("arg0path=''", &with(s(""))));
    }

    #[test]
    fn arg0namespace_follows_the_spec_example() {
        let rule = "member='NameOwnerChanged',arg0namespace='com.example.backend1'";
        let owner_changed = |name: &str| {
            signal(
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "NameOwnerChanged",
                vec![s(name), s(""), s(":1.3")],
            )
        };
        for yes in [
            "com.example.backend1",
            "com.example.backend1.foo",
            "com.example.backend1.foo.bar",
        ] {
            assert!(matches(rule, &owner_changed(yes)), "{yes}");
        }
        for no in [
            "com.example.backend10",
            "com.example.backend",
            "com.example",
            "com.example.backend2.foo",
        ] {
            assert!(!matches(rule, &owner_changed(no)), "{no}");
        }
        let path_arg = signal("/", "org.example.I", "M", vec![o("/com")]);
        assert!(!matches("arg0namespace='com'", &path_arg));
    }

    #[test]
    fn string_args_are_decoded_at_most_twice_per_message() {
        // The cache returns the same answers whichever argument is asked first.
        let msg = signal("/", "org.example.I", "M", vec![s("a"), s("b")]);
        let input = MatchInput::new(&msg, &PLAIN, None);
        assert_eq!(input.arg(1).map(|a| a.value), Some("b"));
        assert_eq!(input.arg(0).map(|a| a.value), Some("a"));
        assert_eq!(input.arg(2), None);
        assert!(parse("arg1='b',arg0='a'").matches(&input));
        assert!(!parse("arg1='a'").matches(&input));
    }
}
