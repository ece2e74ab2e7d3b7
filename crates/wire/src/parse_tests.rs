//! One test per validation rule of `Message::parse`, on hand-made bytes so
//! that malformed input the builder refuses to produce can be tried, in
//! both byte orders.

use bytes::Bytes;

use crate::write::Writer;
use crate::{Endian, Error, ErrorKind, Message, Value, MAX_ARRAY_LEN};

const BOTH: [Endian; 2] = [Endian::Little, Endian::Big];

/// Header fields as (code, value), each written as a variant of the value's
/// own type, so wrong types can be tried.
fn raw_message(
    endian: Endian,
    msg_type: u8,
    serial: u32,
    fields: &[(u8, Value)],
    body: &[u8],
) -> Vec<u8> {
    let mut w = Writer::new(endian);
    w.u8(endian.to_byte());
    w.u8(msg_type);
    w.u8(0);
    w.u8(1);
    w.u32(body.len() as u32);
    w.u32(serial);
    let array = w.begin_array(8);
    for (code, value) in fields {
        w.align(8);
        w.u8(*code);
        // Strings are written unchecked so that invalid ones can be tried.
        match value {
            Value::String(v) => {
                w.signature(b"s");
                w.string(v);
            }
            Value::ObjectPath(v) => {
                w.signature(b"o");
                w.string(v);
            }
            Value::Signature(v) => {
                w.signature(b"g");
                w.signature(v.as_bytes());
            }
            other => w
                .value(b"v", &Value::Variant(Box::new(other.clone())), 2)
                .unwrap(),
        }
    }
    w.end_array(array).unwrap();
    w.align(8);
    w.buf.extend_from_slice(body);
    w.buf
}

fn parse(bytes: Vec<u8>) -> Result<Message, Error> {
    Message::parse(Bytes::from(bytes))
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}
fn o(v: &str) -> Value {
    Value::ObjectPath(v.into())
}
fn g(v: &str) -> Value {
    Value::Signature(v.into())
}

fn call_fields() -> Vec<(u8, Value)> {
    vec![(1, o("/a")), (3, s("M"))]
}

/// A method return whose body is `body` with signature `sig`.
fn reply(endian: Endian, sig: &str, unix_fds: Option<u32>, body: &[u8]) -> Vec<u8> {
    let mut fields = vec![(5, Value::Uint32(1))];
    if !sig.is_empty() {
        fields.push((8, g(sig)));
    }
    if let Some(n) = unix_fds {
        fields.push((9, Value::Uint32(n)));
    }
    raw_message(endian, 2, 1, &fields, body)
}

/// Body bytes made by the marshaller, for bodies that are valid up to
/// the one thing a test then corrupts.
fn marshal(endian: Endian, values: &[Value]) -> Vec<u8> {
    let mut w = Writer::new(endian);
    for v in values {
        w.value(v.signature().as_bytes(), v, 0).unwrap();
    }
    w.buf
}

fn u32_bytes(endian: Endian, v: u32) -> [u8; 4] {
    match endian {
        Endian::Little => v.to_le_bytes(),
        Endian::Big => v.to_be_bytes(),
    }
}

fn kind(result: Result<Message, Error>) -> ErrorKind {
    result.expect_err("must be refused").kind()
}

#[test]
fn minimal_messages_of_each_type() {
    for e in BOTH {
        assert!(parse(raw_message(e, 1, 1, &call_fields(), &[])).is_ok());
        assert!(parse(raw_message(e, 2, 1, &[(5, Value::Uint32(9))], &[])).is_ok());
        assert!(parse(raw_message(
            e,
            3,
            1,
            &[(5, Value::Uint32(9)), (4, s("a.b"))],
            &[]
        ))
        .is_ok());
        assert!(parse(raw_message(
            e,
            4,
            1,
            &[(1, o("/")), (2, s("a.b")), (3, s("S"))],
            &[]
        ))
        .is_ok());
    }
}

#[test]
fn required_fields_per_type() {
    for e in BOTH {
        let missing: &[(u8, &[(u8, Value)])] = &[
            (1, &[(1, o("/a"))]),
            (1, &[(3, s("M"))]),
            (2, &[]),
            (3, &[(5, Value::Uint32(9))]),
            (3, &[(4, s("a.b"))]),
            (4, &[(1, o("/")), (2, s("a.b"))]),
            (4, &[(1, o("/")), (3, s("S"))]),
            (4, &[(2, s("a.b")), (3, s("S"))]),
        ];
        for (t, fields) in missing {
            assert_eq!(
                kind(parse(raw_message(e, *t, 1, fields, &[]))),
                ErrorKind::Header
            );
        }
    }
}

#[test]
fn fixed_header_rules() {
    for e in BOTH {
        assert_eq!(
            kind(parse(raw_message(e, 1, 0, &call_fields(), &[]))),
            ErrorKind::Header
        );
        assert_eq!(
            kind(parse(raw_message(e, 0, 1, &call_fields(), &[]))),
            ErrorKind::Header
        );
        assert_eq!(
            kind(parse(raw_message(e, 9, 1, &call_fields(), &[]))),
            ErrorKind::UnknownMessageType(9)
        );
        let mut bad_version = raw_message(e, 1, 1, &call_fields(), &[]);
        bad_version[3] = 2;
        assert_eq!(kind(parse(bad_version)), ErrorKind::BadVersion);
        let mut bad_endian = raw_message(e, 1, 1, &call_fields(), &[]);
        bad_endian[0] = b'b';
        assert_eq!(kind(parse(bad_endian)), ErrorKind::BadEndian);
        // Unknown flags are ignored.
        let mut flags = raw_message(e, 1, 1, &call_fields(), &[]);
        flags[2] = 0xff;
        assert_eq!(parse(flags).unwrap().flags(), 0xff);
    }
}

#[test]
fn length_must_match_exactly() {
    for e in BOTH {
        let good = raw_message(e, 1, 1, &call_fields(), &[]);
        for cut in [0, 5, 15, 16, good.len() - 1] {
            assert_eq!(
                kind(parse(good[..cut].to_vec())),
                ErrorKind::Truncated,
                "{cut}"
            );
        }
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(kind(parse(longer)), ErrorKind::Header);
    }
}

#[test]
fn header_field_types_are_checked() {
    for e in BOTH {
        let wrong: [(u8, Value); 9] = [
            (1, s("/a")),
            (2, o("/a")),
            (3, Value::Uint32(1)),
            (4, g("s")),
            (5, Value::Int32(1)),
            (6, Value::Variant(Box::new(s("a.b")))),
            (7, Value::Byte(1)),
            (8, s("s")),
            (9, Value::Uint64(1)),
        ];
        for field in wrong {
            let mut fields = call_fields();
            fields.retain(|(c, _)| *c != field.0);
            fields.push(field.clone());
            assert_eq!(
                kind(parse(raw_message(e, 1, 1, &fields, &[]))),
                ErrorKind::Header,
                "{field:?}"
            );
        }
    }
}

#[test]
fn header_field_values_are_checked() {
    for e in BOTH {
        let invalid: [(u8, Value); 8] = [
            (1, o("/a/")),
            (2, s("nodots")),
            (3, s("a.b")),
            (3, s("")),
            (4, s("1.x")),
            (6, s("a..b")),
            (7, s(":")),
            (8, g("a")),
        ];
        for field in invalid {
            let mut fields = call_fields();
            fields.retain(|(c, _)| *c != field.0);
            fields.push(field.clone());
            assert!(
                parse(raw_message(e, 1, 1, &fields, &[])).is_err(),
                "{field:?}"
            );
        }
        let zero_reply_serial = raw_message(e, 2, 1, &[(5, Value::Uint32(0))], &[]);
        assert_eq!(kind(parse(zero_reply_serial)), ErrorKind::Header);
    }
}

#[test]
fn local_path_and_interface_are_refused() {
    for e in BOTH {
        let local_path = [(1, o("/org/freedesktop/DBus/Local")), (3, s("M"))];
        assert_eq!(
            kind(parse(raw_message(e, 1, 1, &local_path, &[]))),
            ErrorKind::Header
        );
        let local_iface = [
            (1, o("/a")),
            (2, s("org.freedesktop.DBus.Local")),
            (3, s("M")),
        ];
        assert_eq!(
            kind(parse(raw_message(e, 1, 1, &local_iface, &[]))),
            ErrorKind::Header
        );
        let near = [(1, o("/org/freedesktop/DBus/Locals")), (3, s("M"))];
        assert!(parse(raw_message(e, 1, 1, &near, &[])).is_ok());
    }
}

#[test]
fn duplicate_and_zero_field_codes_are_refused() {
    for e in BOTH {
        let mut twice = call_fields();
        twice.push((3, s("Other")));
        assert_eq!(
            kind(parse(raw_message(e, 1, 1, &twice, &[]))),
            ErrorKind::Header
        );
        let mut zero = call_fields();
        zero.push((0, s("x")));
        assert_eq!(
            kind(parse(raw_message(e, 1, 1, &zero, &[]))),
            ErrorKind::Header
        );
    }
}

#[test]
fn unknown_fields_are_skipped_but_validated() {
    for e in BOTH {
        let mut fields = call_fields();
        fields.insert(1, (200, Value::Struct(vec![s("x"), Value::Uint64(5)])));
        fields.push((
            10,
            Value::Array {
                elem_sig: "{sv}".into(),
                items: vec![],
            },
        ));
        let m = parse(raw_message(e, 1, 1, &fields, &[])).unwrap();
        assert_eq!(m.member(), Some("M"));

        let mut fields = call_fields();
        fields.push((77, Value::Bool(true)));
        let mut bytes = raw_message(e, 1, 1, &fields, &[]);
        // The boolean is the last 4 bytes of the field array: make it 2.
        let at = bytes.len() - 8 + if e == Endian::Little { 4 } else { 7 };
        assert_eq!(bytes[at], 1, "test setup: found the boolean");
        bytes[at] = 2;
        assert!(parse(bytes).is_err());
    }
}

#[test]
fn header_padding_must_be_zero() {
    for e in BOTH {
        // Path "/a" ends the field array 2 bytes short of a multiple of 8.
        let fields = [(3, s("M")), (1, o("/ab"))];
        let mut bytes = raw_message(e, 1, 1, &fields, &[]);
        let last = bytes.len() - 1;
        assert_eq!(bytes[last], 0);
        bytes[last] = 1;
        assert!(parse(bytes).is_err());
    }
}

#[test]
fn body_must_match_signature_length() {
    for e in BOTH {
        let body = marshal(e, &[Value::Uint32(7)]);
        assert!(parse(reply(e, "u", None, &body)).is_ok());
        assert_eq!(kind(parse(reply(e, "", None, &body))), ErrorKind::Body);
        assert_eq!(
            kind(parse(reply(e, "uu", None, &body))),
            ErrorKind::Truncated
        );
        assert_eq!(kind(parse(reply(e, "y", None, &body))), ErrorKind::Body);
    }
}

#[test]
fn booleans_only_zero_or_one() {
    for e in BOTH {
        for (v, ok) in [(0, true), (1, true), (2, false), (0x100, false)] {
            let body = u32_bytes(e, v);
            assert_eq!(parse(reply(e, "b", None, &body)).is_ok(), ok, "{v}");
        }
    }
}

#[test]
fn strings_rules() {
    for e in BOTH {
        let good = marshal(e, &[s("abc")]);
        assert!(parse(reply(e, "s", None, &good)).is_ok());
        let mut interior_nul = good.clone();
        interior_nul[5] = 0;
        assert_eq!(
            kind(parse(reply(e, "s", None, &interior_nul))),
            ErrorKind::Body
        );
        let mut no_terminator = good.clone();
        no_terminator[7] = b'x';
        assert_eq!(
            kind(parse(reply(e, "s", None, &no_terminator))),
            ErrorKind::Body
        );
        let mut not_utf8 = good.clone();
        not_utf8[4] = 0xff;
        assert_eq!(kind(parse(reply(e, "s", None, &not_utf8))), ErrorKind::Body);
        let mut too_long = good.clone();
        too_long[..4].copy_from_slice(&u32_bytes(e, 4));
        assert!(parse(reply(e, "s", None, &too_long)).is_err());
        let mut huge = good;
        huge[..4].copy_from_slice(&u32_bytes(e, u32::MAX));
        assert_eq!(
            kind(parse(reply(e, "s", None, &huge))),
            ErrorKind::Truncated
        );
    }
}

#[test]
fn object_paths_and_signatures_in_bodies() {
    for e in BOTH {
        let path = marshal(e, &[s("/a/")]);
        assert!(parse(reply(e, "o", None, &path)).is_err());
        let path = marshal(e, &[s("/a/b")]);
        assert!(parse(reply(e, "o", None, &path)).is_ok());
        let sig = marshal(e, &[s("x")]); // u32 length: not a signature
        assert!(parse(reply(e, "g", None, &sig)).is_err());
        for (sig, ok) in [("a{sv}", true), ("a{vs}", false), ("(", false), ("", true)] {
            let body = [&[sig.len() as u8][..], sig.as_bytes(), &[0]].concat();
            assert_eq!(parse(reply(e, "g", None, &body)).is_ok(), ok, "{sig}");
        }
    }
}

#[test]
fn padding_in_body_must_be_zero() {
    for e in BOTH {
        let mut body = marshal(e, &[Value::Byte(1), Value::Uint32(2)]);
        assert!(parse(reply(e, "yu", None, &body)).is_ok());
        body[2] = 9;
        assert_eq!(kind(parse(reply(e, "yu", None, &body))), ErrorKind::Body);
        // Padding between an array length and its 8-aligned elements.
        let mut body = marshal(
            e,
            &[Value::Array {
                elem_sig: "t".into(),
                items: vec![Value::Uint64(1)],
            }],
        );
        assert_eq!(body.len(), 16);
        assert!(parse(reply(e, "at", None, &body)).is_ok());
        body[5] = 1;
        assert!(parse(reply(e, "at", None, &body)).is_err());
        // Even an empty array is padded to its element alignment.
        let mut empty = marshal(
            e,
            &[Value::Array {
                elem_sig: "t".into(),
                items: vec![],
            }],
        );
        assert_eq!(empty.len(), 8);
        assert!(parse(reply(e, "at", None, &empty)).is_ok());
        empty[7] = 1;
        assert!(parse(reply(e, "at", None, &empty)).is_err());
    }
}

#[test]
fn array_lengths() {
    for e in BOTH {
        let items = vec![Value::Uint16(1), Value::Uint16(2)];
        let good = marshal(
            e,
            &[Value::Array {
                elem_sig: "q".into(),
                items,
            }],
        );
        assert!(parse(reply(e, "aq", None, &good)).is_ok());
        let mut odd = good.clone();
        odd[..4].copy_from_slice(&u32_bytes(e, 3));
        assert!(parse(reply(e, "aqy", None, &odd)).is_err());
        let mut over = good.clone();
        over[..4].copy_from_slice(&u32_bytes(e, MAX_ARRAY_LEN as u32 + 1));
        assert_eq!(
            kind(parse(reply(e, "aq", None, &over))),
            ErrorKind::TooLarge
        );
        // A string that runs past the end of its array.
        let strings = marshal(
            e,
            &[
                Value::Array {
                    elem_sig: "s".into(),
                    items: vec![s("ab")],
                },
                Value::Byte(0),
            ],
        );
        assert!(parse(reply(e, "asy", None, &strings)).is_ok());
        let mut short = strings.clone();
        short[..4].copy_from_slice(&u32_bytes(e, 6));
        assert!(parse(reply(e, "asy", None, &short)).is_err());
    }
}

#[test]
fn unix_fd_index_is_not_checked_against_unix_fds() {
    // As libdbus: the receiver judges an index that points at no fd.
    for e in BOTH {
        let body = u32_bytes(e, 1);
        assert!(parse(reply(e, "h", Some(2), &body)).is_ok());
        assert!(parse(reply(e, "h", Some(1), &body)).is_ok());
        let message = parse(reply(e, "h", None, &body)).expect("routable");
        assert_eq!(message.body_values().unwrap(), vec![Value::UnixFd(1)]);
    }
}

#[test]
fn variant_signature_must_be_one_type() {
    for e in BOTH {
        for (sig, ok) in [
            (&b"y"[..], true),
            (b"", false),
            (b"yy", false),
            (b"a", false),
        ] {
            let body = [&[sig.len() as u8][..], sig, &[0, 5, 0]].concat();
            let body = if ok {
                &body[..body.len() - 1]
            } else {
                &body[..]
            };
            assert_eq!(parse(reply(e, "v", None, body)).is_ok(), ok, "{sig:?}");
        }
    }
}

/// `levels` variants nested in one another around a byte.
fn nested_variants(levels: usize) -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 1..levels {
        body.extend_from_slice(&[1, b'v', 0]);
    }
    body.extend_from_slice(&[1, b'y', 0, 7]);
    body
}

#[test]
fn total_depth_counts_variants() {
    for e in BOTH {
        assert!(parse(reply(e, "v", None, &nested_variants(64))).is_ok());
        assert_eq!(
            kind(parse(reply(e, "v", None, &nested_variants(65)))),
            ErrorKind::TooLarge
        );
        let at_limit = nested_variants(64);
        let m = parse(reply(e, "v", None, &at_limit)).unwrap();
        let mut value = &m.body_values().unwrap()[0];
        let mut depth = 0;
        while let Value::Variant(inner) = value {
            depth += 1;
            value = inner;
        }
        assert_eq!((depth, value), (64, &Value::Byte(7)));
    }
}

#[test]
fn deep_signatures_plus_a_variant_exceed_depth() {
    for e in BOTH {
        // 32 arrays, each empty but the outermost, which holds 31 more.
        let sig = format!("{}v", "a".repeat(32));
        let mut w = Writer::new(e);
        let empty_inner = Value::Array {
            elem_sig: format!("{}v", "a".repeat(30)),
            items: vec![],
        };
        let outer = Value::Array {
            elem_sig: format!("{}v", "a".repeat(31)),
            items: vec![empty_inner],
        };
        w.value(sig.as_bytes(), &outer, 0).unwrap();
        assert!(parse(reply(e, &sig, None, &w.buf)).is_ok());
        // A variant holding 32 nested structs inside 32 nested arrays of
        // single elements goes beyond 64.
        let structs = format!("{}y{}", "(".repeat(32), ")".repeat(32));
        let mut value = Value::Byte(1);
        for _ in 0..32 {
            value = Value::Struct(vec![value]);
        }
        let mut elem_sig = structs.clone();
        for _ in 0..32 {
            value = Value::Array {
                elem_sig: elem_sig.clone(),
                items: vec![value],
            };
            elem_sig = format!("a{elem_sig}");
        }
        let mut w = Writer::new(e);
        w.value(elem_sig.as_bytes(), &value, 0).unwrap();
        assert!(parse(reply(e, &elem_sig, None, &w.buf)).is_ok());
        let mut variant = vec![elem_sig.len() as u8];
        variant.extend_from_slice(elem_sig.as_bytes());
        variant.push(0);
        variant.resize(variant.len().next_multiple_of(4), 0);
        // Alignment inside the variant is relative to the body start.
        let mut body = variant.clone();
        let mut w = Writer::new(e);
        w.buf.extend_from_slice(&body);
        w.value(elem_sig.as_bytes(), &value, 0).unwrap();
        body = w.buf;
        assert_eq!(kind(parse(reply(e, "v", None, &body))), ErrorKind::TooLarge);
    }
}

#[test]
fn signature_field_limits() {
    for e in BOTH {
        let long = "y".repeat(255);
        assert!(parse(reply(e, &long, None, &[0u8; 255])).is_ok());
        let nested = format!("{}y", "a".repeat(33));
        assert!(parse(reply(e, &nested, None, &[0u8; 4])).is_err());
    }
}

#[test]
fn dict_entries_only_in_arrays() {
    for e in BOTH {
        let body = marshal(e, &[Value::Byte(1), Value::Byte(2)]);
        assert!(parse(reply(e, "{yy}", None, &body)).is_err());
    }
}

#[test]
fn name_fields_with_nul_or_non_utf8_bytes_get_the_string_errors() {
    // The name fields skip the generic string checks when their stricter
    // validator passes; what fails must still be reported as before.
    let fields: [(u8, Value, &[u8]); 5] = [
        (1, o("/pq"), b"/pq"),
        (2, s("a.pq"), b"a.pq"),
        (3, s("Mpq"), b"Mpq"),
        (6, s("a.pq"), b"a.pq"),
        (7, s(":1.pq"), b":1.pq"),
    ];
    for e in BOTH {
        for (code, value, text) in &fields {
            let mut all = call_fields();
            all.retain(|(c, _)| c != code);
            all.push((*code, value.clone()));
            let good = raw_message(e, 1, 1, &all, &[]);
            assert!(parse(good.clone()).is_ok(), "{value:?}");
            let at = good
                .windows(text.len() + 1)
                .rposition(|w| &w[..text.len()] == *text && w[text.len()] == 0)
                .expect("the field's bytes")
                + text.len()
                - 1;
            for (byte, error) in [(0xff, "not UTF-8"), (0, "NUL byte")] {
                let mut bad = good.clone();
                bad[at] = byte;
                let err = parse(bad).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::Body, "{value:?} {byte}");
                assert!(err.to_string().contains(error), "{value:?}: {err}");
            }
        }
    }
}
