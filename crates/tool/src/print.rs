//! Message bodies printed the way `busctl call` prints them: the
//! signature, then the values; arrays as a count then the items, variants
//! as their signature then the value, strings quoted and C-escaped.

use std::fmt::Write;

use quickbus_wire::Value;

/// `SIGNATURE VALUE...`, or "" for an empty body.
pub fn format_body(signature: &str, values: &[Value]) -> String {
    if values.is_empty() {
        return String::new();
    }
    let mut out = String::from(signature);
    for value in values {
        format_value(value, &mut out);
    }
    out
}

/// Append ` value` (each word preceded by a space).
fn format_value(value: &Value, out: &mut String) {
    match value {
        Value::Byte(v) => write_word(out, v),
        Value::Bool(v) => write_word(out, v),
        Value::Int16(v) => write_word(out, v),
        Value::Uint16(v) => write_word(out, v),
        Value::Int32(v) => write_word(out, v),
        Value::Uint32(v) => write_word(out, v),
        Value::Int64(v) => write_word(out, v),
        Value::Uint64(v) => write_word(out, v),
        Value::UnixFd(v) => write_word(out, v),
        Value::Double(v) => {
            out.push(' ');
            out.push_str(&format_double(*v));
        }
        Value::String(s) | Value::ObjectPath(s) | Value::Signature(s) => {
            out.push_str(" \"");
            c_escape(s, out);
            out.push('"');
        }
        Value::Array { items, .. } => {
            write_word(out, items.len());
            for item in items {
                format_value(item, out);
            }
        }
        Value::Struct(fields) => {
            for field in fields {
                format_value(field, out);
            }
        }
        Value::DictEntry(k, v) => {
            format_value(k, out);
            format_value(v, out);
        }
        Value::Variant(inner) => {
            out.push(' ');
            out.push_str(&inner.signature());
            format_value(inner, out);
        }
    }
}

fn write_word(out: &mut String, word: impl std::fmt::Display) {
    let _ = write!(out, " {word}");
}

/// Escape like C string literals (and systemd's cescape): the usual
/// backslash escapes, other control bytes and all non-ASCII bytes as \xNN.
fn c_escape(s: &str, out: &mut String) {
    for &b in s.as_bytes() {
        match b {
            b'\x07' => out.push_str("\\a"),
            b'\x08' => out.push_str("\\b"),
            b'\x0c' => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'\x0b' => out.push_str("\\v"),
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\'' => out.push_str("\\'"),
            b' '..=b'~' => out.push(char::from(b)),
            other => {
                let _ = write!(out, "\\x{other:02x}");
            }
        }
    }
}

/// C's `%g`: six significant digits, trailing zeros dropped, exponent
/// notation below 1e-4 and from 1e6 up.
pub(crate) fn format_double(v: f64) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    const PRECISION: i32 = 6;
    // The exponent after rounding to PRECISION significant digits.
    let sci = format!("{:.*e}", (PRECISION - 1) as usize, v);
    let (mantissa, exp) = sci.split_once('e').expect("exponent notation");
    let exp: i32 = exp.parse().expect("integer exponent");
    if !(-4..PRECISION).contains(&exp) {
        let mantissa = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (PRECISION - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{v:.decimals$}")).to_owned()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_string() {
        assert_eq!(
            format_body("s", &[Value::String(":1.3".into())]),
            "s \":1.3\""
        );
    }

    #[test]
    fn empty_body_prints_nothing() {
        assert_eq!(format_body("", &[]), "");
    }

    #[test]
    fn arrays_dicts_variants_structs() {
        let entry = |k: &str, v: Value| {
            Value::DictEntry(
                Box::new(Value::String(k.into())),
                Box::new(Value::Variant(Box::new(v))),
            )
        };
        let values = vec![
            Value::Array {
                elem_sig: "{sv}".into(),
                items: vec![
                    entry("One", Value::String("Eins".into())),
                    entry("Two", Value::Uint32(2)),
                ],
            },
            Value::Struct(vec![Value::Bool(true), Value::ObjectPath("/a".into())]),
            Value::Array {
                elem_sig: "y".into(),
                items: vec![],
            },
        ];
        assert_eq!(
            format_body("a{sv}(bo)ay", &values),
            "a{sv}(bo)ay 2 \"One\" s \"Eins\" \"Two\" u 2 true \"/a\" 0"
        );
    }

    #[test]
    fn numbers() {
        let values = vec![
            Value::Byte(200),
            Value::Int16(-2),
            Value::Int64(-9_000_000_000),
            Value::Uint64(u64::MAX),
            Value::UnixFd(0),
            Value::Bool(false),
        ];
        assert_eq!(
            format_body("ynxthb", &values),
            "ynxthb 200 -2 -9000000000 18446744073709551615 0 false"
        );
    }

    #[test]
    fn doubles_like_printf_g() {
        for (v, want) in [
            (1.5, "1.5"),
            (0.1, "0.1"),
            (0.0, "0"),
            (100.0, "100"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (1.23456789, "1.23457"),
            (-2.0, "-2"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (-2.5, "-2.5"),
            (1.0 / 3.0, "0.333333"),
            (999999.5, "1e+06"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(format_double(v), want, "{v}");
        }
    }

    #[test]
    fn strings_are_c_escaped() {
        let mut out = String::new();
        c_escape("a\"b\\c\nd'\u{1}é", &mut out);
        assert_eq!(out, "a\\\"b\\\\c\\nd\\'\\x01\\xc3\\xa9");
    }
}
