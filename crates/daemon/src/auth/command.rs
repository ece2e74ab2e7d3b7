//! One line the client sent during authentication, split into a command and
//! its arguments the way dbus-daemon splits it, plus the hex codec SASL
//! payloads travel in.

/// A client command. Arguments borrow from the line.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Command<'a> {
    /// `AUTH` alone (`mechanism` is `None`) asks for the mechanism list.
    Auth {
        mechanism: Option<&'a str>,
        /// Hex text, possibly empty; decoded later so that bad hex can be
        /// answered with ERROR rather than REJECTED.
        initial_response: &'a str,
    },
    Cancel,
    Begin,
    /// Hex text, possibly empty.
    Data(&'a str),
    Error,
    NegotiateUnixFd,
    /// A word we do not know, or one only a server may send (OK, REJECTED,
    /// AGREE_UNIX_FD): both are answered with ERROR.
    Unknown,
}

/// The line has a byte outside ASCII or a NUL, which the spec forbids.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct NotAscii;

/// Parse one line, without its `\r\n`.
pub(super) fn parse(line: &[u8]) -> Result<Command<'_>, NotAscii> {
    if !line.is_ascii() || line.contains(&0) {
        return Err(NotAscii);
    }
    // Every byte is ASCII, so this cannot fail.
    let line = std::str::from_utf8(line).map_err(|_| NotAscii)?;
    let (name, args) = split_word(line);
    Ok(match name {
        "AUTH" => {
            if args.is_empty() {
                Command::Auth {
                    mechanism: None,
                    initial_response: "",
                }
            } else {
                let (mechanism, initial_response) = split_word(args);
                Command::Auth {
                    mechanism: Some(mechanism),
                    initial_response,
                }
            }
        }
        "CANCEL" => Command::Cancel,
        "BEGIN" => Command::Begin,
        "DATA" => Command::Data(args),
        "ERROR" => Command::Error,
        "NEGOTIATE_UNIX_FD" => Command::NegotiateUnixFd,
        _ => Command::Unknown,
    })
}

/// libdbus counts both space and tab as blanks.
fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// The first word, and the rest with its leading blanks skipped (trailing
/// blanks stay: libdbus keeps them, so `DATA 31 ` is bad hex there too).
fn split_word(s: &str) -> (&str, &str) {
    match s.find(is_blank) {
        Some(end) => (&s[..end], s[end..].trim_start_matches(is_blank)),
        None => (s, ""),
    }
}

/// Decode hex text (either case) as libdbus's `_dbus_string_hex_decode`
/// does: `None` at a non-hex digit; an odd last digit is taken as the high
/// half of a last byte (`"3"` is the byte `0x30`), which dbus-daemon
/// accepts, so `AUTH EXTERNAL 3` is uid 0 there and here.
pub(super) fn decode_hex(text: &str) -> Option<Vec<u8>> {
    text.as_bytes()
        .chunks(2)
        .map(|pair| {
            let high = hex_value(pair[0])? << 4;
            match pair.get(1) {
                Some(&low) => Some(high | hex_value(low)?),
                None => Some(high),
            }
        })
        .collect()
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_without_arguments_asks_for_mechanisms() {
        assert_eq!(
            parse(b"AUTH"),
            Ok(Command::Auth {
                mechanism: None,
                initial_response: ""
            })
        );
        assert_eq!(
            parse(b"AUTH "),
            Ok(Command::Auth {
                mechanism: None,
                initial_response: ""
            })
        );
    }

    #[test]
    fn auth_splits_mechanism_and_initial_response_on_blanks() {
        assert_eq!(
            parse(b"AUTH EXTERNAL 31303030"),
            Ok(Command::Auth {
                mechanism: Some("EXTERNAL"),
                initial_response: "31303030"
            })
        );
        assert_eq!(
            parse(b"AUTH\t EXTERNAL \t31"),
            Ok(Command::Auth {
                mechanism: Some("EXTERNAL"),
                initial_response: "31"
            })
        );
        assert_eq!(
            parse(b"AUTH EXTERNAL"),
            Ok(Command::Auth {
                mechanism: Some("EXTERNAL"),
                initial_response: ""
            })
        );
    }

    #[test]
    fn simple_commands() {
        assert_eq!(parse(b"CANCEL"), Ok(Command::Cancel));
        assert_eq!(parse(b"BEGIN"), Ok(Command::Begin));
        assert_eq!(parse(b"ERROR"), Ok(Command::Error));
        assert_eq!(parse(b"ERROR \"some text\""), Ok(Command::Error));
        assert_eq!(parse(b"NEGOTIATE_UNIX_FD"), Ok(Command::NegotiateUnixFd));
        assert_eq!(parse(b"DATA"), Ok(Command::Data("")));
        assert_eq!(parse(b"DATA 3132"), Ok(Command::Data("3132")));
    }

    #[test]
    fn server_commands_and_unknown_words_are_unknown() {
        for line in [
            &b"OK 1234"[..],
            b"REJECTED EXTERNAL",
            b"AGREE_UNIX_FD",
            b"FOOBAR",
            b"auth EXTERNAL",
            b"",
            b" AUTH",
        ] {
            assert_eq!(parse(line), Ok(Command::Unknown), "{line:?}");
        }
    }

    #[test]
    fn non_ascii_and_nul_are_refused() {
        assert_eq!(parse(b"AUTH \xff"), Err(NotAscii));
        assert_eq!(parse(b"AUTH\0"), Err(NotAscii));
    }

    #[test]
    fn hex_decodes_both_cases() {
        assert_eq!(decode_hex(""), Some(vec![]));
        assert_eq!(decode_hex("31303030"), Some(b"1000".to_vec()));
        assert_eq!(decode_hex("aBcD"), Some(vec![0xab, 0xcd]));
    }

    #[test]
    fn hex_refuses_non_digits() {
        assert_eq!(decode_hex("3g"), None);
        assert_eq!(decode_hex("31 "), None);
        assert_eq!(decode_hex("31z"), None);
    }

    #[test]
    fn an_odd_last_digit_is_a_high_half_as_in_libdbus() {
        assert_eq!(decode_hex("3"), Some(b"0".to_vec()));
        assert_eq!(decode_hex("313"), Some(b"10".to_vec()));
    }
}
