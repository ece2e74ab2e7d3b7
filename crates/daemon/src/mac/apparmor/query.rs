//! The kernel's AppArmor query interface, as pure functions: the labels
//! `SO_PEERSEC` and `/proc/self/attr` give (`label (mode)`), the queries
//! written to `apparmorfs/.access` for the `dbus` class, and the answer
//! read back. The formats are libapparmor's `aa_query_label` and
//! `aa_splitcon`, and dbus-daemon's `build_*_query` in `bus/apparmor.c`.

/// The `dbus` mediation class (`AA_CLASS_DBUS`).
pub const CLASS_DBUS: u8 = 32;

/// The `dbus` class's permission bits (`AA_DBUS_*`).
pub const SEND: u32 = 1 << 1;
pub const RECEIVE: u32 = 1 << 2;
pub const EAVESDROP: u32 = 1 << 5;
pub const BIND: u32 = 1 << 6;

/// The command every label query starts with, NUL included
/// (`AA_QUERY_CMD_LABEL`, `AA_QUERY_CMD_LABEL_SIZE`).
const QUERY_CMD_LABEL: &[u8] = b"label\0";

/// The answer's exact length: four lines of `word 0x%08x`
/// (libapparmor's `QUERY_LABEL_REPLY_LEN`).
pub const ANSWER_LEN: usize = 67;

/// A confinement context: a label and, when the label is a profile's, its
/// mode (`enforce`, `complain`, ...). The kernel's `unconfined` has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confinement {
    pub label: String,
    pub mode: Option<String>,
}

impl Confinement {
    /// Split `label (mode)` as libapparmor's `aa_splitcon` does, after
    /// dropping the NUL and newline the kernel may end it with.
    pub fn parse(raw: &[u8]) -> Confinement {
        let mut raw = raw;
        while let Some((&(0 | b'\n'), rest)) = raw.split_last() {
            raw = rest;
        }
        let text = String::from_utf8_lossy(raw);
        if let Some(open) = text.strip_suffix(')').and_then(|t| t.rfind(" (")) {
            let mode = &text[open + 2..text.len() - 1];
            return Confinement {
                label: text[..open].to_owned(),
                mode: Some(mode.to_owned()),
            };
        }
        Confinement {
            label: text.into_owned(),
            mode: None,
        }
    }

    /// dbus-daemon's `is_unconfined`: the mode says so, or there is no
    /// mode and the label is `unconfined`.
    pub fn is_unconfined(&self) -> bool {
        match &self.mode {
            Some(mode) => mode == "unconfined",
            None => self.label == "unconfined",
        }
    }

    /// A profile in complain mode is never refused (only logged).
    pub fn is_complain(&self) -> bool {
        self.mode.as_deref() == Some("complain")
    }
}

/// `label\0` LABEL `\0` CLASS BUSTYPE: what every dbus query begins with.
fn common(label: &str, bus_type: Option<&str>) -> Vec<u8> {
    let mut q = QUERY_CMD_LABEL.to_vec();
    q.extend_from_slice(label.as_bytes());
    q.push(0);
    q.push(CLASS_DBUS);
    q.extend_from_slice(bus_type.unwrap_or("").as_bytes());
    q
}

/// A NUL, then the field if it is set (dbus-daemon's `query_append`).
fn field(q: &mut Vec<u8>, value: Option<&str>) {
    q.push(0);
    if let Some(v) = value {
        q.extend_from_slice(v.as_bytes());
    }
}

/// `bind`: may `label` own `name`?
pub fn service_query(label: &str, bus_type: Option<&str>, name: &str) -> Vec<u8> {
    let mut q = common(label, bus_type);
    field(&mut q, Some(name));
    q
}

/// The fields of a message query, asked from one end of the message.
#[derive(Clone, Copy, Debug)]
pub struct MessageFields<'a> {
    /// The other end's name (the destination for `send`, the sender's
    /// name for `receive`).
    pub name: &'a str,
    /// The other end's label (None: an activation whose service file
    /// names none).
    pub peer_label: Option<&'a str>,
    pub path: Option<&'a str>,
    pub interface: Option<&'a str>,
    pub member: Option<&'a str>,
}

/// `send` or `receive`: may `label` exchange this message with the peer?
pub fn message_query(label: &str, bus_type: Option<&str>, m: &MessageFields<'_>) -> Vec<u8> {
    let mut q = common(label, bus_type);
    field(&mut q, Some(m.name));
    field(&mut q, m.peer_label);
    field(&mut q, m.path);
    field(&mut q, m.interface);
    field(&mut q, m.member);
    q
}

/// `eavesdrop`: may `label` see other peers' messages?
pub fn eavesdrop_query(label: &str, bus_type: Option<&str>) -> Vec<u8> {
    common(label, bus_type)
}

/// The four masks the kernel answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub allow: u32,
    pub deny: u32,
    pub audit: u32,
    pub quiet: u32,
}

/// Why an answer could not be read, as libapparmor reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadAnswer {
    /// Not exactly [`ANSWER_LEN`] bytes (EPROTO).
    Length,
    /// Not the four lines (EPROTONOSUPPORT).
    Format,
}

impl Answer {
    /// `allow 0x%08x\ndeny 0x%08x\naudit 0x%08x\nquiet 0x%08x\n`.
    pub fn parse(raw: &[u8]) -> Result<Answer, BadAnswer> {
        if raw.len() != ANSWER_LEN {
            return Err(BadAnswer::Length);
        }
        let text = std::str::from_utf8(raw).map_err(|_| BadAnswer::Format)?;
        let mut lines = text.split_terminator('\n');
        let mut mask = |word: &str| -> Result<u32, BadAnswer> {
            let line = lines.next().ok_or(BadAnswer::Format)?;
            let hex = line
                .strip_prefix(word)
                .and_then(|l| l.strip_prefix(" 0x"))
                .ok_or(BadAnswer::Format)?;
            if hex.is_empty() || hex.len() > 8 {
                return Err(BadAnswer::Format);
            }
            u32::from_str_radix(hex, 16).map_err(|_| BadAnswer::Format)
        };
        Ok(Answer {
            allow: mask("allow")?,
            deny: mask("deny")?,
            audit: mask("audit")?,
            quiet: mask("quiet")?,
        })
    }

    /// (allowed, audited) for the permissions in `mask`, as
    /// `aa_query_label` decides: every bit allowed and not denied; a
    /// refusal is audited unless quieted, an allowance only if audited.
    pub fn verdict(&self, mask: u32) -> (bool, bool) {
        let allowed = mask & !(self.allow & !self.deny) == 0;
        let audit = if allowed { self.audit } else { u32::MAX };
        let audited = mask & !(audit & !self.quiet) == 0;
        (allowed, audited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_split_into_label_and_mode_as_libapparmor_splits_them() {
        assert_eq!(
            Confinement::parse(b"/usr/bin/foo (enforce)\0"),
            Confinement {
                label: "/usr/bin/foo".into(),
                mode: Some("enforce".into())
            }
        );
        let u = Confinement::parse(b"unconfined\n");
        assert_eq!((u.label.as_str(), u.mode.as_deref()), ("unconfined", None));
        assert!(u.is_unconfined());
        // A stacked label keeps its inner parentheses in the label.
        let stacked = Confinement::parse(b"snap.a (b)//&c (complain)");
        assert_eq!(stacked.label, "snap.a (b)//&c");
        assert!(stacked.is_complain() && !stacked.is_unconfined());
        assert!(Confinement::parse(b"x (unconfined)").is_unconfined());
        assert!(!Confinement::parse(b"unconfined (enforce)").is_unconfined());
        assert!(!Confinement::parse(b"/usr/bin/foo").is_unconfined());
    }

    #[test]
    fn the_bind_query_is_byte_exact() {
        assert_eq!(
            service_query("/usr/bin/svc", Some("system"), "org.example.Svc"),
            b"label\0/usr/bin/svc\0\x20system\0org.example.Svc".to_vec()
        );
        // No <type>: an empty bus type, as dbus-daemon sends it.
        assert_eq!(
            service_query("p", None, "a.b"),
            b"label\0p\0\x20\0a.b".to_vec()
        );
    }

    #[test]
    fn the_send_and_receive_queries_are_byte_exact() {
        let send = MessageFields {
            name: "org.example.Svc",
            peer_label: Some("/usr/bin/svc"),
            path: Some("/org/example"),
            interface: Some("org.example.I"),
            member: Some("Ping"),
        };
        assert_eq!(
            message_query("/usr/bin/client", Some("session"), &send),
            b"label\0/usr/bin/client\0\x20session\0org.example.Svc\0/usr/bin/svc\0/org/example\0org.example.I\0Ping".to_vec()
        );
        // Unset fields (a signal without interface, an activation with no
        // assumed label) are empty, their NULs kept.
        let receive = MessageFields {
            name: ":1.7",
            peer_label: None,
            path: Some("/"),
            interface: None,
            member: Some("Changed"),
        };
        assert_eq!(
            message_query("/usr/bin/svc", Some("system"), &receive),
            b"label\0/usr/bin/svc\0\x20system\0:1.7\0\0/\0\0Changed".to_vec()
        );
    }

    #[test]
    fn the_eavesdrop_query_is_byte_exact() {
        assert_eq!(
            eavesdrop_query("/usr/bin/mon", Some("system")),
            b"label\0/usr/bin/mon\0\x20system".to_vec()
        );
    }

    fn answer(allow: u32, deny: u32, audit: u32, quiet: u32) -> Vec<u8> {
        format!(
            "allow 0x{allow:08x}\ndeny 0x{deny:08x}\naudit 0x{audit:08x}\nquiet 0x{quiet:08x}\n"
        )
        .into_bytes()
    }

    #[test]
    fn answers_are_read_as_libapparmor_reads_them() {
        let raw = answer(0x46, 0, 0x2, 0);
        assert_eq!(raw.len(), ANSWER_LEN);
        assert_eq!(
            Answer::parse(&raw),
            Ok(Answer {
                allow: 0x46,
                deny: 0,
                audit: 2,
                quiet: 0
            })
        );
        assert_eq!(Answer::parse(&raw[..66]), Err(BadAnswer::Length));
        let mut swapped = raw.clone();
        swapped[..5].copy_from_slice(b"allwo");
        assert_eq!(Answer::parse(&swapped), Err(BadAnswer::Format));
        let mut not_hex = raw;
        not_hex[10] = b'g';
        assert_eq!(Answer::parse(&not_hex), Err(BadAnswer::Format));
    }

    #[test]
    fn allow_deny_audit_and_quiet_masks_decide_as_aa_query_label() {
        let v = |allow, deny, audit, quiet, mask| {
            Answer::parse(&answer(allow, deny, audit, quiet))
                .unwrap()
                .verdict(mask)
        };
        // Allowed, not audited.
        assert_eq!(v(SEND | RECEIVE, 0, 0, 0, SEND), (true, false));
        // Allowed and audited ("audit dbus send").
        assert_eq!(v(SEND, 0, SEND, 0, SEND), (true, true));
        // Allowed but an explicit deny wins.
        assert_eq!(v(SEND, SEND, 0, 0, SEND), (false, true));
        // Not allowed: audited, unless quiet ("deny" rules are quiet).
        assert_eq!(v(0, 0, 0, 0, BIND), (false, true));
        assert_eq!(v(0, BIND, 0, BIND, BIND), (false, false));
        // Another permission's bits do not matter.
        assert_eq!(v(RECEIVE, 0, 0, 0, SEND), (false, true));
        assert_eq!(v(EAVESDROP, 0, 0, SEND, EAVESDROP), (true, false));
    }
}
