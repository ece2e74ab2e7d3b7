//! D-Bus server addresses: parsing and escaping (pure string handling, no I/O).
//!
//! The grammar, from the specification's "Server Addresses" section:
//! a `;`-separated list of entries, each `transport:key=value,key=value`,
//! every value percent-escaped. Bytes of the set `[-0-9A-Za-z_/.\*]` may
//! appear as they are; every other byte must be written `%XX`.
//!
//! [`parse_addresses`] gives the generic view ([`AddressEntry`]); the
//! transports quickbus speaks have typed views ([`UnixAddress`],
//! [`TcpAddress`] for `tcp:` and `nonce-tcp:`) used both to listen (daemon)
//! and to connect (client).

use std::fmt;
use std::path::PathBuf;

/// Why an address was refused. `Display` names the offending part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressError {
    /// The whole address list is empty.
    Empty,
    /// An entry has no `:` between transport and keys.
    MissingColon { entry: String },
    /// An entry starts with `:`.
    EmptyTransport { entry: String },
    /// A `key=value` pair lacks its `=`, its key or its value.
    BadPair { pair: String },
    /// The same key twice in one entry.
    DuplicateKey { key: String },
    /// A `%` not followed by two hex digits.
    BadEscape { value: String, offset: usize },
    /// A byte outside the optionally-escaped set written unescaped.
    MustBeEscaped { value: String, byte: u8 },
    /// The unescaped bytes of a value are not UTF-8.
    NotUtf8 { key: String },
    /// A typed view was asked of an entry of another transport.
    UnknownTransport { transport: String },
    /// None of the keys the transport needs is present.
    MissingKey {
        transport: String,
        expected: &'static str,
    },
    /// Two keys that exclude each other.
    ConflictingKeys { first: String, second: String },
    /// A key with a value the transport does not accept.
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressError::Empty => write!(f, "empty address"),
            AddressError::MissingColon { entry } => {
                write!(
                    f,
                    "address entry '{entry}' has no ':' after the transport name"
                )
            }
            AddressError::EmptyTransport { entry } => {
                write!(f, "address entry '{entry}' has an empty transport name")
            }
            AddressError::BadPair { pair } => {
                write!(f, "'{pair}' is not a key=value pair with a key and a value")
            }
            AddressError::DuplicateKey { key } => write!(f, "key '{key}' given twice"),
            AddressError::BadEscape { value, offset } => write!(
                f,
                "bad escape in '{value}' at byte {offset}: '%' must be followed by two hex digits"
            ),
            AddressError::MustBeEscaped { value, byte } => write!(
                f,
                "in '{value}' the byte {} must be escaped as %{byte:02x}",
                describe_byte(*byte)
            ),
            AddressError::NotUtf8 { key } => {
                write!(f, "the value of key '{key}' is not UTF-8 once unescaped")
            }
            AddressError::UnknownTransport { transport } => {
                write!(
                    f,
                    "unsupported transport '{transport}' (quickbus speaks unix, tcp and nonce-tcp)"
                )
            }
            AddressError::MissingKey {
                transport,
                expected,
            } => {
                write!(f, "{transport} address needs one of the keys {expected}")
            }
            AddressError::ConflictingKeys { first, second } => {
                write!(f, "keys '{first}' and '{second}' cannot be used together")
            }
            AddressError::BadValue {
                key,
                value,
                expected,
            } => {
                write!(f, "key '{key}' has value '{value}', expected {expected}")
            }
        }
    }
}

impl std::error::Error for AddressError {}

fn describe_byte(byte: u8) -> String {
    if byte.is_ascii_graphic() {
        format!("'{}'", byte as char)
    } else {
        format!("0x{byte:02x}")
    }
}

/// Bytes that may appear in a value without escaping.
pub fn is_optionally_escaped(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'/' | b'.' | b'\\' | b'*')
}

/// Escape raw bytes for use as an address value: optionally-escaped bytes
/// stay as they are, every other byte becomes `%xx`.
pub fn escape_value(raw: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(raw.len());
    for &byte in raw {
        if is_optionally_escaped(byte) {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 0xf)] as char);
        }
    }
    out
}

/// Undo [`escape_value`]. Refuses a `%` without two hex digits and any
/// byte that should have been escaped, as the specification requires.
pub fn unescape_value(escaped: &str) -> Result<Vec<u8>, AddressError> {
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if byte == b'%' {
            let digits = bytes.get(i + 1..i + 3);
            let decoded = digits.and_then(|d| Some(hex_digit(d[0])? << 4 | hex_digit(d[1])?));
            let Some(decoded) = decoded else {
                return Err(AddressError::BadEscape {
                    value: escaped.to_owned(),
                    offset: i,
                });
            };
            out.push(decoded);
            i += 3;
        } else if is_optionally_escaped(byte) {
            out.push(byte);
            i += 1;
        } else {
            return Err(AddressError::MustBeEscaped {
                value: escaped.to_owned(),
                byte,
            });
        }
    }
    Ok(out)
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// One `transport:key=value,...` entry, values unescaped, keys in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressEntry {
    transport: String,
    pairs: Vec<(String, String)>,
}

impl AddressEntry {
    /// An entry built from already unescaped parts.
    pub fn new(transport: impl Into<String>, pairs: Vec<(String, String)>) -> AddressEntry {
        AddressEntry {
            transport: transport.into(),
            pairs,
        }
    }

    /// Parse a single entry (no `;`).
    pub fn parse(entry: &str) -> Result<AddressEntry, AddressError> {
        let (transport, rest) =
            entry
                .split_once(':')
                .ok_or_else(|| AddressError::MissingColon {
                    entry: entry.to_owned(),
                })?;
        if transport.is_empty() {
            return Err(AddressError::EmptyTransport {
                entry: entry.to_owned(),
            });
        }
        let mut pairs: Vec<(String, String)> = Vec::new();
        // "unix:" alone is valid: the key list is optional.
        for pair in rest.split(',').filter(|_| !rest.is_empty()) {
            let bad_pair = || AddressError::BadPair {
                pair: pair.to_owned(),
            };
            let (key, value) = pair.split_once('=').ok_or_else(bad_pair)?;
            if key.is_empty() || value.is_empty() {
                return Err(bad_pair());
            }
            if pairs.iter().any(|(k, _)| k == key) {
                return Err(AddressError::DuplicateKey {
                    key: key.to_owned(),
                });
            }
            let value =
                String::from_utf8(unescape_value(value)?).map_err(|_| AddressError::NotUtf8 {
                    key: key.to_owned(),
                })?;
            pairs.push((key.to_owned(), value));
        }
        Ok(AddressEntry {
            transport: transport.to_owned(),
            pairs,
        })
    }

    pub fn transport(&self) -> &str {
        &self.transport
    }

    /// The unescaped value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every `(key, value)` in the order written.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The server's guid (32 hex digits), if the entry names one.
    pub fn guid(&self) -> Result<Option<&str>, AddressError> {
        match self.get("guid") {
            None => Ok(None),
            Some(g) if g.len() == 32 && g.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(Some(g)),
            Some(g) => Err(AddressError::BadValue {
                key: "guid".into(),
                value: g.to_owned(),
                expected: "32 hex digits",
            }),
        }
    }
}

/// The entry written back in address syntax, values escaped.
impl fmt::Display for AddressEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.transport)?;
        for (i, (key, value)) in self.pairs.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{key}={}", escape_value(value.as_bytes()))?;
        }
        Ok(())
    }
}

/// Parse a `;`-separated address list. A trailing `;` is tolerated (as in
/// libdbus); an empty list or an empty entry in the middle is not.
pub fn parse_addresses(addresses: &str) -> Result<Vec<AddressEntry>, AddressError> {
    let trimmed = addresses.strip_suffix(';').unwrap_or(addresses);
    if trimmed.is_empty() {
        return Err(AddressError::Empty);
    }
    trimmed.split(';').map(AddressEntry::parse).collect()
}

/// The typed view of a `unix:` entry: which socket to listen on or
/// connect to. `Tmpdir`, `Dir` and `Runtime` can only be listened on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnixAddress {
    /// `path=`: a socket file.
    Path(PathBuf),
    /// `abstract=`: a name in Linux's abstract namespace (no leading NUL).
    Abstract(Vec<u8>),
    /// `tmpdir=`: a fresh `dbus-XXXXXXXXXX` socket file in that directory,
    /// as `dir=` (never abstract: dbus-daemon 1.14.4 and later, dbus#416).
    Tmpdir(PathBuf),
    /// `dir=`: a fresh `dbus-XXXXXXXXXX` socket file in that directory.
    Dir(PathBuf),
    /// `runtime=yes`: `$XDG_RUNTIME_DIR/bus`.
    Runtime,
}

const UNIX_KEYS: &str = "path, abstract, tmpdir, dir, runtime";

impl UnixAddress {
    /// Whether a client can connect to this address as written.
    pub fn is_connectable(&self) -> bool {
        matches!(self, UnixAddress::Path(_) | UnixAddress::Abstract(_))
    }
}

impl TryFrom<&AddressEntry> for UnixAddress {
    type Error = AddressError;

    /// Exactly one of path, abstract, tmpdir, dir, runtime must be given.
    /// Other keys (guid, and keys a newer peer may add) are left to the
    /// caller, as libdbus does.
    fn try_from(entry: &AddressEntry) -> Result<UnixAddress, AddressError> {
        if entry.transport() != "unix" {
            return Err(AddressError::UnknownTransport {
                transport: entry.transport().to_owned(),
            });
        }
        let mut found: Option<(&str, UnixAddress)> = None;
        for (key, value) in entry.pairs() {
            let address = match key.as_str() {
                "path" => UnixAddress::Path(value.into()),
                "abstract" => UnixAddress::Abstract(value.as_bytes().to_vec()),
                "tmpdir" => UnixAddress::Tmpdir(value.into()),
                "dir" => UnixAddress::Dir(value.into()),
                "runtime" if value == "yes" => UnixAddress::Runtime,
                "runtime" => {
                    return Err(AddressError::BadValue {
                        key: key.clone(),
                        value: value.clone(),
                        expected: "'yes'",
                    })
                }
                _ => continue,
            };
            if let Some((first, _)) = &found {
                return Err(AddressError::ConflictingKeys {
                    first: (*first).to_owned(),
                    second: key.clone(),
                });
            }
            found = Some((key, address));
        }
        found.map(|(_, a)| a).ok_or(AddressError::MissingKey {
            transport: "unix".into(),
            expected: UNIX_KEYS,
        })
    }
}

impl TryFrom<AddressEntry> for UnixAddress {
    type Error = AddressError;

    fn try_from(entry: AddressEntry) -> Result<UnixAddress, AddressError> {
        UnixAddress::try_from(&entry)
    }
}

/// An IP address family, as `family=` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Ipv4,
    Ipv6,
}

impl Family {
    /// The value of `family=`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        }
    }
}

/// The typed view of a `tcp:` or `nonce-tcp:` entry.
///
/// To listen: `host` (default `localhost`) is what the printed address
/// names, `bind` (default: the host; `*`: every interface) what the socket
/// binds to, port 0 (the default) lets the kernel pick. To connect: `host`
/// and `port` are needed, and `noncefile` for nonce-tcp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpAddress {
    /// `nonce-tcp:`: a peer first sends the 16 bytes of the nonce file.
    pub nonce: bool,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub family: Option<Family>,
    pub bind: Option<String>,
    pub noncefile: Option<PathBuf>,
}

impl TryFrom<&AddressEntry> for TcpAddress {
    type Error = AddressError;

    /// Unknown keys (guid, and keys a newer peer may add) are left to the
    /// caller, as libdbus does.
    fn try_from(entry: &AddressEntry) -> Result<TcpAddress, AddressError> {
        let nonce = match entry.transport() {
            "tcp" => false,
            "nonce-tcp" => true,
            other => {
                return Err(AddressError::UnknownTransport {
                    transport: other.to_owned(),
                })
            }
        };
        let port = match entry.get("port") {
            None => None,
            Some(value) => Some(value.parse::<u16>().map_err(|_| AddressError::BadValue {
                key: "port".into(),
                value: value.to_owned(),
                expected: "a port number from 0 to 65535",
            })?),
        };
        let family = match entry.get("family") {
            None => None,
            Some("ipv4") => Some(Family::Ipv4),
            Some("ipv6") => Some(Family::Ipv6),
            Some(other) => {
                return Err(AddressError::BadValue {
                    key: "family".into(),
                    value: other.to_owned(),
                    expected: "'ipv4' or 'ipv6'",
                })
            }
        };
        Ok(TcpAddress {
            nonce,
            host: entry.get("host").map(str::to_owned),
            port,
            family,
            bind: entry.get("bind").map(str::to_owned),
            noncefile: entry.get("noncefile").map(PathBuf::from),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(address: &str) -> Result<UnixAddress, AddressError> {
        UnixAddress::try_from(&AddressEntry::parse(address)?)
    }

    #[test]
    fn optionally_escaped_bytes_stay_and_others_are_hex_escaped() {
        assert_eq!(escape_value(b"/tmp/a-b_c.d\\*Z9"), "/tmp/a-b_c.d\\*Z9");
        assert_eq!(escape_value(b"a b"), "a%20b");
        assert_eq!(escape_value(b"%;,=:"), "%25%3b%2c%3d%3a");
        assert_eq!(escape_value(&[0, 0xff]), "%00%ff");
        assert_eq!(escape_value(b""), "");
    }

    #[test]
    fn unescape_reverses_escape_for_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unescape_value(&escape_value(&all)).unwrap(), all);
    }

    #[test]
    fn unescape_accepts_upper_case_hex_and_escaped_safe_bytes() {
        assert_eq!(unescape_value("%2F%41b").unwrap(), b"/Ab");
    }

    #[test]
    fn unescape_refuses_truncated_or_non_hex_escapes() {
        for (value, offset) in [("ab%", 2), ("%4", 0), ("x%zz", 1), ("%4g", 0)] {
            let err = unescape_value(value).unwrap_err();
            assert_eq!(
                err,
                AddressError::BadEscape {
                    value: value.into(),
                    offset
                }
            );
            assert!(err.to_string().contains("two hex digits"), "{err}");
        }
    }

    #[test]
    fn unescape_refuses_bytes_that_must_be_escaped() {
        let err = unescape_value("a b").unwrap_err();
        assert_eq!(
            err,
            AddressError::MustBeEscaped {
                value: "a b".into(),
                byte: b' '
            }
        );
        assert_eq!(
            err.to_string(),
            "in 'a b' the byte 0x20 must be escaped as %20"
        );
        assert!(unescape_value("a;b").is_err());
        assert!(unescape_value("é").is_err());
    }

    #[test]
    fn entries_keep_transport_and_unescaped_pairs_in_order() {
        let list = parse_addresses("unix:path=/tmp/a%20b,guid=0123456789abcdef0123456789abcdef;tcp:host=localhost,port=4242").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].transport(), "unix");
        assert_eq!(list[0].get("path"), Some("/tmp/a b"));
        assert_eq!(
            list[0].guid().unwrap(),
            Some("0123456789abcdef0123456789abcdef")
        );
        assert_eq!(list[1].transport(), "tcp");
        assert_eq!(
            list[1].pairs(),
            &[
                ("host".to_owned(), "localhost".to_owned()),
                ("port".to_owned(), "4242".to_owned())
            ]
        );
        assert_eq!(list[1].get("family"), None);
    }

    #[test]
    fn a_transport_without_keys_and_a_trailing_semicolon_are_valid() {
        let list = parse_addresses("autolaunch:;").unwrap();
        assert_eq!(list, vec![AddressEntry::new("autolaunch", vec![])]);
    }

    #[test]
    fn malformed_lists_are_refused_with_the_part_named() {
        assert_eq!(parse_addresses("").unwrap_err(), AddressError::Empty);
        assert_eq!(parse_addresses(";").unwrap_err(), AddressError::Empty);
        assert_eq!(
            parse_addresses("unix:path=/a;;unix:path=/b").unwrap_err(),
            AddressError::MissingColon { entry: "".into() }
        );
        let err = parse_addresses("nocolon").unwrap_err();
        assert_eq!(
            err.to_string(),
            "address entry 'nocolon' has no ':' after the transport name"
        );
        assert_eq!(
            parse_addresses(":path=/a").unwrap_err(),
            AddressError::EmptyTransport {
                entry: ":path=/a".into()
            }
        );
        for pair in ["path", "=x", "path="] {
            assert_eq!(
                parse_addresses(&format!("unix:{pair}")).unwrap_err(),
                AddressError::BadPair { pair: pair.into() }
            );
        }
        assert_eq!(
            parse_addresses("unix:path=/a,").unwrap_err(),
            AddressError::BadPair { pair: "".into() }
        );
        assert_eq!(
            parse_addresses("unix:path=/a,path=/b")
                .unwrap_err()
                .to_string(),
            "key 'path' given twice"
        );
        assert_eq!(
            parse_addresses("unix:path=%ff").unwrap_err(),
            AddressError::NotUtf8 { key: "path".into() }
        );
    }

    #[test]
    fn bad_guids_are_refused() {
        let entry = AddressEntry::parse("unix:path=/a,guid=xyz").unwrap();
        assert!(entry
            .guid()
            .unwrap_err()
            .to_string()
            .contains("32 hex digits"));
        assert_eq!(
            AddressEntry::parse("unix:path=/a").unwrap().guid(),
            Ok(None)
        );
    }

    #[test]
    fn display_writes_the_entry_back_escaped() {
        let text = "unix:path=/tmp/a%20b,guid=00";
        let entry = AddressEntry::parse(text).unwrap();
        assert_eq!(entry.to_string(), text);
        assert_eq!(AddressEntry::parse(&entry.to_string()).unwrap(), entry);
    }

    #[test]
    fn every_unix_key_has_its_typed_form() {
        assert_eq!(
            unix("unix:path=/run/bus"),
            Ok(UnixAddress::Path("/run/bus".into()))
        );
        assert_eq!(
            unix("unix:abstract=/tmp/dbus-x"),
            Ok(UnixAddress::Abstract(b"/tmp/dbus-x".to_vec()))
        );
        assert_eq!(
            unix("unix:tmpdir=/tmp"),
            Ok(UnixAddress::Tmpdir("/tmp".into()))
        );
        assert_eq!(
            unix("unix:dir=/run/x"),
            Ok(UnixAddress::Dir("/run/x".into()))
        );
        assert_eq!(unix("unix:runtime=yes"), Ok(UnixAddress::Runtime));
        // guid and unknown keys do not change the socket.
        assert_eq!(
            unix("unix:guid=0123456789abcdef0123456789abcdef,path=/a,family=x"),
            Ok(UnixAddress::Path("/a".into()))
        );
        assert!(unix("unix:path=/a").unwrap().is_connectable());
        assert!(unix("unix:abstract=a").unwrap().is_connectable());
        assert!(!unix("unix:tmpdir=/tmp").unwrap().is_connectable());
        assert!(!unix("unix:runtime=yes").unwrap().is_connectable());
    }

    #[test]
    fn unix_views_refuse_other_transports_and_bad_key_sets() {
        assert_eq!(
            unix("launchd:env=X").unwrap_err().to_string(),
            "unsupported transport 'launchd' (quickbus speaks unix, tcp and nonce-tcp)"
        );
        assert_eq!(
            unix("unix:guid=0123456789abcdef0123456789abcdef")
                .unwrap_err()
                .to_string(),
            "unix address needs one of the keys path, abstract, tmpdir, dir, runtime"
        );
        assert_eq!(unix("unix:"), unix("unix:guid=00"));
        assert_eq!(
            unix("unix:path=/a,abstract=b").unwrap_err(),
            AddressError::ConflictingKeys {
                first: "path".into(),
                second: "abstract".into()
            }
        );
        assert_eq!(
            unix("unix:tmpdir=/tmp,runtime=yes")
                .unwrap_err()
                .to_string(),
            "keys 'tmpdir' and 'runtime' cannot be used together"
        );
        assert_eq!(
            unix("unix:runtime=no").unwrap_err().to_string(),
            "key 'runtime' has value 'no', expected 'yes'"
        );
    }

    fn tcp(address: &str) -> Result<TcpAddress, AddressError> {
        TcpAddress::try_from(&AddressEntry::parse(address)?)
    }

    #[test]
    fn tcp_entries_have_a_typed_view() {
        let t = tcp("tcp:host=127.0.0.1,port=0,family=ipv4,bind=*").unwrap();
        assert!(!t.nonce);
        assert_eq!(t.host.as_deref(), Some("127.0.0.1"));
        assert_eq!(t.port, Some(0));
        assert_eq!(t.family, Some(Family::Ipv4));
        assert_eq!(t.bind.as_deref(), Some("*"));
        let n = tcp("nonce-tcp:host=localhost,port=4242,noncefile=/tmp/n%20x").unwrap();
        assert!(n.nonce);
        assert_eq!(n.noncefile, Some(PathBuf::from("/tmp/n x")));
        assert_eq!(tcp("tcp:").unwrap().port, None);
        assert!(matches!(
            tcp("tcp:port=65536"),
            Err(AddressError::BadValue { .. })
        ));
        assert!(matches!(
            tcp("tcp:family=ipx"),
            Err(AddressError::BadValue { .. })
        ));
        assert!(matches!(
            tcp("unix:path=/x"),
            Err(AddressError::UnknownTransport { .. })
        ));
    }
}
