//! busctl's command-line syntax for message arguments: a signature, then
//! one word per basic value; arrays as a count then the items, variants as
//! a signature then the value, structs and dict entries inline.

use quickbus_wire::types::Type;
use quickbus_wire::Value;

/// Turn `SIGNATURE ARG...` into message body values. An empty slice is an
/// empty body.
pub fn parse_args(words: &[String]) -> Result<Vec<Value>, String> {
    let Some((sig, rest)) = words.split_first() else {
        return Ok(Vec::new());
    };
    let types = Type::parse_all(sig).map_err(|e| format!("invalid signature {sig:?}: {e}"))?;
    let mut input = rest.iter();
    let mut values = Vec::with_capacity(types.len());
    for t in &types {
        values.push(parse_value(t, &mut input)?);
    }
    if let Some(extra) = input.next() {
        return Err(format!(
            "too many arguments for signature {sig:?} (from {extra:?})"
        ));
    }
    Ok(values)
}

fn parse_value<'a>(
    t: &Type,
    input: &mut impl Iterator<Item = &'a String>,
) -> Result<Value, String> {
    // Structs and dict entries take no word of their own.
    match t {
        Type::Struct(fields) => {
            let items = fields
                .iter()
                .map(|f| parse_value(f, input))
                .collect::<Result<_, _>>()?;
            return Ok(Value::Struct(items));
        }
        Type::DictEntry(k, v) => {
            let key = parse_value(k, input)?;
            let value = parse_value(v, input)?;
            return Ok(Value::DictEntry(Box::new(key), Box::new(value)));
        }
        _ => {}
    }
    let word = input
        .next()
        .ok_or_else(|| format!("too few arguments: a value of type {t} is missing"))?;
    let value = match t {
        Type::Byte => Value::Byte(number(word, t)?),
        Type::Bool => Value::Bool(boolean(word)?),
        Type::Int16 => Value::Int16(number(word, t)?),
        Type::Uint16 => Value::Uint16(number(word, t)?),
        Type::Int32 => Value::Int32(number(word, t)?),
        Type::Uint32 => Value::Uint32(number(word, t)?),
        Type::Int64 => Value::Int64(number(word, t)?),
        Type::Uint64 => Value::Uint64(number(word, t)?),
        Type::Double => Value::Double(
            word.parse()
                .map_err(|_| format!("cannot parse {word:?} as a double"))?,
        ),
        Type::String => Value::String(word.clone()),
        Type::ObjectPath => {
            if !quickbus_wire::names::is_valid_object_path(word) {
                return Err(format!("{word:?} is not a valid object path"));
            }
            Value::ObjectPath(word.clone())
        }
        Type::Signature => {
            Type::parse_all(word).map_err(|e| format!("{word:?} is not a valid signature: {e}"))?;
            Value::Signature(word.clone())
        }
        Type::UnixFd => {
            return Err("unix fd arguments (type h) cannot be passed from the command line".into())
        }
        Type::Variant => {
            let inner =
                Type::parse_single(word).map_err(|e| format!("bad variant signature: {e}"))?;
            Value::Variant(Box::new(parse_value(&inner, input)?))
        }
        Type::Array(elem) => {
            let count: usize = word
                .parse()
                .map_err(|_| format!("cannot parse {word:?} as an array length"))?;
            let mut items = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                items.push(parse_value(elem, input)?);
            }
            Value::Array {
                elem_sig: elem.to_string(),
                items,
            }
        }
        Type::Struct(_) | Type::DictEntry(..) => unreachable!("handled above"),
    };
    Ok(value)
}

fn boolean(word: &str) -> Result<bool, String> {
    match word.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" | "y" | "t" => Ok(true),
        "false" | "no" | "off" | "0" | "n" | "f" => Ok(false),
        _ => Err(format!("cannot parse {word:?} as a boolean")),
    }
}

/// Decimal, or hexadecimal with a 0x prefix.
fn number<N>(word: &str, t: &Type) -> Result<N, String>
where
    N: TryFrom<i128>,
{
    let (negative, digits) = match word.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, word.strip_prefix('+').unwrap_or(word)),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => i128::from_str_radix(hex, 16),
        None => digits.parse::<i128>(),
    };
    let value = match magnitude {
        Ok(m) if !digits.starts_with(['+', '-']) => {
            if negative {
                -m
            } else {
                m
            }
        }
        _ => return Err(format!("cannot parse {word:?} as {}", type_name(t))),
    };
    N::try_from(value).map_err(|_| format!("{word} is out of range for {}", type_name(t)))
}

fn type_name(t: &Type) -> &'static str {
    match t {
        Type::Byte => "a byte",
        Type::Int16 => "a signed 16-bit integer",
        Type::Uint16 => "an unsigned 16-bit integer",
        Type::Int32 => "a signed 32-bit integer",
        Type::Uint32 => "an unsigned 32-bit integer",
        Type::Int64 => "a signed 64-bit integer",
        Type::Uint64 => "an unsigned 64-bit integer",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    fn s(v: &str) -> Value {
        Value::String(v.into())
    }

    #[test]
    fn no_words_is_an_empty_body() {
        assert_eq!(parse_args(&[]).unwrap(), vec![]);
    }

    #[test]
    fn basic_types() {
        let got = parse_args(&words(
            "ybnqiuxtdsog 255 yes -3 4 -5 6 -7 8 1.5 hi /a/b a{sv}",
        ))
        .unwrap();
        assert_eq!(
            got,
            vec![
                Value::Byte(255),
                Value::Bool(true),
                Value::Int16(-3),
                Value::Uint16(4),
                Value::Int32(-5),
                Value::Uint32(6),
                Value::Int64(-7),
                Value::Uint64(8),
                Value::Double(1.5),
                s("hi"),
                Value::ObjectPath("/a/b".into()),
                Value::Signature("a{sv}".into()),
            ]
        );
    }

    #[test]
    fn booleans_and_hex() {
        assert_eq!(
            parse_args(&words("bbbu off 0 TRUE 0x10")).unwrap(),
            vec![
                Value::Bool(false),
                Value::Bool(false),
                Value::Bool(true),
                Value::Uint32(16)
            ]
        );
    }

    #[test]
    fn arrays_take_a_count() {
        assert_eq!(
            parse_args(&words("as 3 hello world foobar")).unwrap(),
            vec![Value::Array {
                elem_sig: "s".into(),
                items: vec![s("hello"), s("world"), s("foobar")]
            }]
        );
        assert_eq!(
            parse_args(&words("ai 0")).unwrap(),
            vec![Value::Array {
                elem_sig: "i".into(),
                items: vec![]
            }]
        );
    }

    #[test]
    fn the_busctl_manual_dict_example() {
        let got = parse_args(&words("a{sv} 3 One s Eins Two u 2 Yes b true")).unwrap();
        let entry = |k: &str, v: Value| {
            Value::DictEntry(Box::new(s(k)), Box::new(Value::Variant(Box::new(v))))
        };
        assert_eq!(
            got,
            vec![Value::Array {
                elem_sig: "{sv}".into(),
                items: vec![
                    entry("One", s("Eins")),
                    entry("Two", Value::Uint32(2)),
                    entry("Yes", Value::Bool(true)),
                ]
            }]
        );
    }

    #[test]
    fn structs_are_inline_and_variants_nest() {
        assert_eq!(
            parse_args(&words("(sv)i x v i 7 9")).unwrap(),
            vec![
                Value::Struct(vec![
                    s("x"),
                    Value::Variant(Box::new(Value::Variant(Box::new(Value::Int32(7)))))
                ]),
                Value::Int32(9)
            ]
        );
    }

    #[test]
    fn mistakes_are_reported() {
        for (input, wanted) in [
            ("s", "too few"),
            ("s a b", "too many"),
            ("y 256", "out of range"),
            ("u -1", "out of range"),
            ("i x", "cannot parse"),
            ("i --1", "cannot parse"),
            ("b maybe", "boolean"),
            ("o notapath", "object path"),
            ("as two a b", "array length"),
            ("v ss a b", "variant"),
            ("h 0", "unix fd"),
            ("a{", "invalid signature"),
            ("g a{", "not a valid signature"),
        ] {
            let err = parse_args(&words(input)).unwrap_err();
            assert!(err.contains(wanted), "{input}: {err}");
        }
    }
}
