//! D-Bus type signatures parsed into a tree, so command-line arguments can
//! be read one complete type at a time.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Byte,
    Bool,
    Int16,
    Uint16,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Double,
    String,
    ObjectPath,
    Signature,
    UnixFd,
    Variant,
    Array(Box<Type>),
    Struct(Vec<Type>),
    DictEntry(Box<Type>, Box<Type>),
}

impl Type {
    fn is_basic(&self) -> bool {
        !matches!(
            self,
            Type::Variant | Type::Array(_) | Type::Struct(_) | Type::DictEntry(..)
        )
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = match self {
            Type::Byte => "y",
            Type::Bool => "b",
            Type::Int16 => "n",
            Type::Uint16 => "q",
            Type::Int32 => "i",
            Type::Uint32 => "u",
            Type::Int64 => "x",
            Type::Uint64 => "t",
            Type::Double => "d",
            Type::String => "s",
            Type::ObjectPath => "o",
            Type::Signature => "g",
            Type::UnixFd => "h",
            Type::Variant => "v",
            Type::Array(elem) => return write!(f, "a{elem}"),
            Type::Struct(fields) => {
                f.write_str("(")?;
                for field in fields {
                    write!(f, "{field}")?;
                }
                return f.write_str(")");
            }
            Type::DictEntry(k, v) => return write!(f, "{{{k}{v}}}"),
        };
        f.write_str(code)
    }
}

/// Parse a whole signature into its complete types.
pub fn parse_signature(sig: &str) -> Result<Vec<Type>, String> {
    let bytes = sig.as_bytes();
    let mut pos = 0;
    let mut types = Vec::new();
    while pos < bytes.len() {
        types.push(parse_one(bytes, &mut pos, 0)?);
    }
    Ok(types)
}

/// Parse a signature that must hold exactly one complete type.
pub fn parse_single(sig: &str) -> Result<Type, String> {
    let mut types = parse_signature(sig)?;
    if types.len() != 1 {
        return Err(format!("{sig:?} is not a single complete type"));
    }
    Ok(types.pop().expect("one type"))
}

/// Containers nest at most 64 deep (32 arrays + 32 structs in the spec).
const MAX_DEPTH: usize = 64;

fn parse_one(sig: &[u8], pos: &mut usize, depth: usize) -> Result<Type, String> {
    if depth > MAX_DEPTH {
        return Err("signature nests too deeply".into());
    }
    let Some(&c) = sig.get(*pos) else {
        return Err("signature ends inside a container".into());
    };
    *pos += 1;
    let t = match c {
        b'y' => Type::Byte,
        b'b' => Type::Bool,
        b'n' => Type::Int16,
        b'q' => Type::Uint16,
        b'i' => Type::Int32,
        b'u' => Type::Uint32,
        b'x' => Type::Int64,
        b't' => Type::Uint64,
        b'd' => Type::Double,
        b's' => Type::String,
        b'o' => Type::ObjectPath,
        b'g' => Type::Signature,
        b'h' => Type::UnixFd,
        b'v' => Type::Variant,
        b'a' => {
            if sig.get(*pos) == Some(&b'{') {
                *pos += 1;
                let key = parse_one(sig, pos, depth + 1)?;
                if !key.is_basic() {
                    return Err("dict keys must be basic types".into());
                }
                let value = parse_one(sig, pos, depth + 1)?;
                if sig.get(*pos) != Some(&b'}') {
                    return Err("dict entry must hold exactly two types".into());
                }
                *pos += 1;
                Type::Array(Box::new(Type::DictEntry(Box::new(key), Box::new(value))))
            } else {
                Type::Array(Box::new(parse_one(sig, pos, depth + 1)?))
            }
        }
        b'(' => {
            let mut fields = Vec::new();
            while sig.get(*pos) != Some(&b')') {
                fields.push(parse_one(sig, pos, depth + 1)?);
            }
            *pos += 1;
            if fields.is_empty() {
                return Err("empty struct in signature".into());
            }
            Type::Struct(fields)
        }
        other => return Err(format!("unexpected {:?} in signature", char::from(other))),
    };
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_signatures_round_trip() {
        for sig in [
            "s",
            "a{sv}",
            "(ia(ss))",
            "aay",
            "a{oa{sa{sv}}}",
            "yqnuixtdbogvh",
        ] {
            let types = parse_signature(sig).unwrap();
            let back: String = types.iter().map(|t| t.to_string()).collect();
            assert_eq!(back, sig);
        }
        assert_eq!(parse_signature("su").unwrap().len(), 2);
        assert_eq!(
            parse_single("a{sv}").unwrap(),
            Type::Array(Box::new(Type::DictEntry(
                Box::new(Type::String),
                Box::new(Type::Variant)
            )))
        );
    }

    #[test]
    fn bad_signatures_are_rejected() {
        for sig in ["a", "(", "()", "a{vs}", "a{sss}", "{sv}", "z", "(s", "a{s}"] {
            assert!(parse_signature(sig).is_err(), "{sig}");
        }
        assert!(parse_single("ss").is_err());
        assert!(parse_single("").is_err());
        let deep = "a".repeat(100) + "s";
        assert!(parse_signature(&deep).is_err());
    }
}
