//! A signature as a tree of complete types, for code that must read or
//! build values one complete type at a time (the `quickbus call` argument
//! syntax). The signature is checked by the same validator as message
//! bodies ([`crate::signature`]), so both accept exactly the same
//! signatures and limits.

use std::fmt;

use crate::signature::{Parsed, MAX_SIGNATURE_LEN};
use crate::Error;

/// One complete type.
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
    /// Every complete type of `signature`, in order (none for `""`).
    pub fn parse_all(signature: &str) -> Result<Vec<Type>, Error> {
        let mut ends = [0; MAX_SIGNATURE_LEN];
        let parsed = Parsed::new(signature.as_bytes(), &mut ends)?;
        let mut types = Vec::new();
        let mut at = 0;
        while at < parsed.len() {
            types.push(build(&parsed, at)?);
            at = parsed.end(at);
        }
        Ok(types)
    }

    /// The one complete type `signature` must hold (what a variant holds).
    pub fn parse_single(signature: &str) -> Result<Type, Error> {
        let mut ends = [0; MAX_SIGNATURE_LEN];
        let parsed = Parsed::single(signature.as_bytes(), &mut ends)?;
        build(&parsed, 0)
    }
}

/// The complete type starting at `at` of a validated signature. Recursion
/// is bounded by the validator's depth limits.
fn build(parsed: &Parsed<'_>, at: usize) -> Result<Type, Error> {
    let basic = match parsed.code(at) {
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
        b'a' => return Ok(Type::Array(Box::new(build(parsed, at + 1)?))),
        b'{' => {
            let key = build(parsed, at + 1)?;
            let value = build(parsed, parsed.end(at + 1))?;
            return Ok(Type::DictEntry(Box::new(key), Box::new(value)));
        }
        b'(' => {
            let mut fields = Vec::new();
            let mut field = at + 1;
            while parsed.code(field) != b')' {
                fields.push(build(parsed, field)?);
                field = parsed.end(field);
            }
            return Ok(Type::Struct(fields));
        }
        // The validator accepted the signature: no other code can start a
        // complete type.
        _ => return Err(Error::signature("unknown type code in signature")),
    };
    Ok(basic)
}

impl fmt::Display for Type {
    /// The type's signature.
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
            let types = Type::parse_all(sig).unwrap();
            let back: String = types.iter().map(|t| t.to_string()).collect();
            assert_eq!(back, sig);
        }
        assert_eq!(Type::parse_all("su").unwrap().len(), 2);
        assert!(Type::parse_all("").unwrap().is_empty());
        assert_eq!(
            Type::parse_single("a{sv}").unwrap(),
            Type::Array(Box::new(Type::DictEntry(
                Box::new(Type::String),
                Box::new(Type::Variant)
            )))
        );
        assert_eq!(
            Type::parse_single("(y(bv))").unwrap(),
            Type::Struct(vec![
                Type::Byte,
                Type::Struct(vec![Type::Bool, Type::Variant])
            ])
        );
    }

    #[test]
    fn bad_signatures_are_rejected_as_message_bodies_are() {
        for sig in [
            "a", "(", "()", "a{vs}", "a{sss}", "{sv}", "z", "(s", "a{s}", "a(s{",
        ] {
            assert!(Type::parse_all(sig).is_err(), "{sig}");
            assert!(!crate::names::is_valid_signature(sig), "{sig}");
        }
        assert!(Type::parse_single("ss").is_err());
        assert!(Type::parse_single("").is_err());
        let deep = "a".repeat(33) + "s";
        assert!(Type::parse_all(&deep).is_err());
        assert!(Type::parse_all(&"s".repeat(256)).is_err());
    }
}
