//! The SASL state table of the spec ("Authentication state diagrams"):
//! every command in every server state, each on a fresh connection, then
//! the corners where a lenient reading of the spec could differ (hex of
//! odd length, the spellings of a uid, an ANONYMOUS trace with a NUL, the
//! sixth rejection). Each conversation ends with `AUTH`, whose answer
//! tells which state the bus was left in (REJECTED when waiting for AUTH,
//! an ERROR naming the state otherwise).

use super::Scenario;
use quickbus_client::sasl::hex;

/// Every mechanism offered, ANONYMOUS included, so that the table shows
/// the conversation rather than which mechanisms each bus offers.
const EVERY_MECHANISM: &str =
    "<auth>ANONYMOUS</auth><auth>DBUS_COOKIE_SHA1</auth><allow_anonymous/>";

/// The state reached by the lines before the command.
fn states(uid: &str) -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("waiting-for-auth", vec![]),
        ("waiting-for-data-external", vec!["AUTH EXTERNAL".into()]),
        (
            "waiting-for-data-cookie",
            vec![format!("AUTH DBUS_COOKIE_SHA1 {uid}")],
        ),
        (
            "waiting-for-begin-external",
            vec![format!("AUTH EXTERNAL {uid}")],
        ),
        ("waiting-for-begin-anonymous", vec!["AUTH ANONYMOUS".into()]),
    ]
}

/// Every command a client can send, well-formed or not.
fn commands(uid: &str, other_uid: &str) -> Vec<Vec<u8>> {
    let text = [
        "AUTH".to_owned(),
        "AUTH EXTERNAL".into(),
        format!("AUTH EXTERNAL {uid}"),
        format!("AUTH EXTERNAL {other_uid}"),
        "AUTH EXTERNAL zz".into(),
        "AUTH FOO".into(),
        "AUTH ANONYMOUS".into(),
        format!("AUTH ANONYMOUS {}", hex(b"trace")),
        "AUTH ANONYMOUS ff".into(),
        "AUTH DBUS_COOKIE_SHA1".into(),
        format!("AUTH DBUS_COOKIE_SHA1 {uid}"),
        "CANCEL".into(),
        "BEGIN".into(),
        "DATA".into(),
        format!("DATA {uid}"),
        format!("DATA {other_uid}"),
        "DATA zz".into(),
        "ERROR".into(),
        "ERROR \"text\"".into(),
        "NEGOTIATE_UNIX_FD".into(),
        "FOO".into(),
        String::new(),
        "OK 0123456789abcdef0123456789abcdef".into(),
        "REJECTED EXTERNAL".into(),
        "AGREE_UNIX_FD".into(),
    ];
    let mut all: Vec<Vec<u8>> = text.into_iter().map(String::into_bytes).collect();
    all.push(b"AUTH \xff".to_vec());
    all
}

/// `lines` then the closing `AUTH` probe (not after BEGIN, which ends
/// the conversation).
fn conversation(lines: impl IntoIterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
    let mut lines: Vec<Vec<u8>> = lines.into_iter().collect();
    if !lines.iter().any(|l| l.starts_with(b"BEGIN")) {
        lines.push(b"AUTH".to_vec());
    }
    lines
}

/// A scenario of conversations (label, lines), each on its own connection.
fn talks(name: &str, config: &str, talks: Vec<(String, Vec<Vec<u8>>)>) -> Scenario {
    Scenario::new(format!("sasl/{name}"), move |script| {
        for (label, lines) in &talks {
            script.sasl(label, &conversation(lines.clone()));
        }
    })
    .config(config)
}

pub fn scenarios() -> Vec<Scenario> {
    let uid = quickbus_client::sasl::current_uid();
    let uid_hex = hex(uid.to_string().as_bytes());
    let other_hex = hex((uid + 1).to_string().as_bytes());
    let mut all = Vec::new();
    for (state, prefix) in states(&uid_hex) {
        let talks_in_state = commands(&uid_hex, &other_hex)
            .into_iter()
            .map(|command| {
                let label = String::from_utf8_lossy(&command).escape_debug().to_string();
                let lines = prefix
                    .iter()
                    .map(|l| l.clone().into_bytes())
                    .chain([command]);
                (label, lines.collect())
            })
            .collect();
        all.push(talks(
            &format!("state/{state}"),
            EVERY_MECHANISM,
            talks_in_state,
        ));
    }

    // libdbus decodes an odd last hex digit as the high half of a byte:
    // "3" is "0". Dropping the last digit of the uid's hex leaves the uid
    // with its last decimal digit made 0.
    let odd = &uid_hex[..uid_hex.len() - 1];
    let line = |text: String| text.into_bytes();
    all.push(talks(
        "hex/odd-length",
        EVERY_MECHANISM,
        vec![
            (
                "AUTH EXTERNAL".into(),
                vec![line(format!("AUTH EXTERNAL {odd}"))],
            ),
            (
                "DATA".into(),
                vec![line("AUTH EXTERNAL".into()), line(format!("DATA {odd}"))],
            ),
            (
                "AUTH ANONYMOUS".into(),
                vec![line("AUTH ANONYMOUS 3".into())],
            ),
            (
                "AUTH DBUS_COOKIE_SHA1".into(),
                vec![line(format!("AUTH DBUS_COOKIE_SHA1 {odd}"))],
            ),
            (
                "odd then bad digit".into(),
                vec![line("AUTH EXTERNAL 3z3".into())],
            ),
        ],
    ));

    // How libdbus reads a numeric identity: strtoul, base 0.
    let mut spellings = vec![
        format!("+{uid}"),
        format!(" {uid}"),
        format!("\t{uid}"),
        format!("{uid:#x}"),
        format!("0{uid:o}"),
        format!("-{uid}"),
        format!("{uid} "),
        format!("00{uid}"),
        format!("{uid}q"),
        "0x".into(),
        "root".into(),
    ];
    // For some uids two spellings coincide ("00{uid}" and "0{uid:o}" for 0).
    spellings.sort();
    spellings.dedup();
    all.push(talks(
        "external/uid-spellings",
        EVERY_MECHANISM,
        spellings
            .iter()
            .map(|s| {
                let label = s.escape_debug().to_string();
                (
                    label,
                    vec![line(format!("AUTH EXTERNAL {}", hex(s.as_bytes())))],
                )
            })
            .collect(),
    ));

    all.push(talks(
        "anonymous/trace",
        EVERY_MECHANISM,
        vec![
            (
                "nul".into(),
                vec![line(format!("AUTH ANONYMOUS {}", hex(b"a\0b")))],
            ),
            (
                "utf-8".into(),
                vec![line(format!("AUTH ANONYMOUS {}", hex("é".as_bytes())))],
            ),
            (
                "long".into(),
                vec![line(format!("AUTH ANONYMOUS {}", hex(&[b'x'; 300])))],
            ),
        ],
    ));

    // dbus-daemon says the sixth REJECTED, then closes.
    all.push(talks(
        "rejections/sixth",
        EVERY_MECHANISM,
        vec![
            ("AUTH FOO".into(), vec![b"AUTH FOO".to_vec(); 6]),
            (
                "after OK".into(),
                [
                    vec![line(format!("AUTH EXTERNAL {uid_hex}")), b"CANCEL".to_vec()],
                    vec![b"ERROR".to_vec(); 4],
                ]
                .concat(),
            ),
            ("errors are no rejections".into(), vec![b"FOO".to_vec(); 8]),
        ],
    ));

    // Without <allow_anonymous/>: a deliberate difference (docs/differences.md).
    all.push(talks(
        "anonymous/not-allowed",
        "<auth>ANONYMOUS</auth>",
        vec![
            ("AUTH".into(), vec![b"AUTH".to_vec()]),
            (
                "AUTH ANONYMOUS then BEGIN".into(),
                vec![b"AUTH ANONYMOUS".to_vec(), b"BEGIN".to_vec()],
            ),
        ],
    ));
    all
}
