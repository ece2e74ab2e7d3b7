//! A SASL identity that is a number, read the way libdbus reads it
//! (`_dbus_is_a_number`: C's `strtoul` with base 0, the whole identity
//! consumed), so EXTERNAL and DBUS_COOKIE_SHA1 accept exactly the uids
//! dbus-daemon accepts: leading blanks, a sign, and hex (`0x3e8`) or
//! octal (`01750`) spellings included. Whatever the spelling, the value is
//! then compared with the uid the kernel gave, so a lenient spelling
//! proves nothing more than the plain one.

/// The value `strtoul(identity, &end, 0)` gives on a 64-bit `unsigned long`
/// when `end` reaches the end of `identity`; `None` when it would not (no
/// digits, anything after them, overflow).
pub(super) fn parse(identity: &[u8]) -> Option<u64> {
    // C's isspace in the "C" locale.
    let start = identity
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))?;
    let mut rest = &identity[start..];
    let negative = match rest.first() {
        Some(b'-') => true,
        Some(b'+') => false,
        _ => {
            return parse_unsigned(rest);
        }
    };
    rest = &rest[1..];
    let value = parse_unsigned(rest)?;
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// Digits after the sign, with strtoul's base-0 prefixes.
fn parse_unsigned(text: &[u8]) -> Option<u64> {
    let (radix, digits) = match text {
        // "0x" counts as a prefix only when a hex digit follows; otherwise
        // strtoul reads just the "0" and stops at the "x".
        [b'0', b'x' | b'X', next, ..] if next.is_ascii_hexdigit() => (16, &text[2..]),
        [b'0', ..] => (8, text),
        _ => (10, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        let digit = (b as char).to_digit(radix)?;
        value = value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(digit))?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn decimal_hex_and_octal_as_strtoul_reads_them() {
        assert_eq!(parse(b"1000"), Some(1000));
        assert_eq!(parse(b"0"), Some(0));
        assert_eq!(parse(b"0x3e8"), Some(1000));
        assert_eq!(parse(b"0X3E8"), Some(1000));
        assert_eq!(parse(b"01750"), Some(1000));
        assert_eq!(parse(b"00"), Some(0));
    }

    #[test]
    fn leading_blanks_and_a_sign_are_allowed() {
        assert_eq!(parse(b" 1000"), Some(1000));
        assert_eq!(parse(b"\t\n1000"), Some(1000));
        assert_eq!(parse(b"+1000"), Some(1000));
        assert_eq!(parse(b"-0"), Some(0));
        assert_eq!(parse(b"-1"), Some(u64::MAX));
    }

    #[test]
    fn anything_after_the_number_or_no_number_is_refused() {
        for bad in [
            &b""[..],
            b" ",
            b"+",
            b"1000 ",
            b"root",
            b"0x",
            b"0xg",
            b"08",
            b"1000\0",
            b"- 1",
            b"18446744073709551616",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(parse(b"18446744073709551615"), Some(u64::MAX));
    }
}
