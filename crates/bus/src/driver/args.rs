//! A driver call's arguments as Rust types: each handler names the tuple
//! its signature decodes to (`let (name, flags): (String, u32) =
//! args.decode()?`).
//!
//! Owns: decoding; touches nothing else.

use quickbus_wire::Value;

use crate::errors::{self, BusError};

/// The call's arguments, already checked against the method's signature.
pub(crate) struct Args(pub(super) Vec<Value>);

impl Args {
    /// The arguments as the method's types. The signature was checked, so
    /// a mismatch is a bug in the table; the caller gets InvalidArgs.
    pub(super) fn decode<T: FromArgs>(self) -> Result<T, BusError> {
        T::from_args(self.0).ok_or_else(|| {
            BusError::new(
                errors::INVALID_ARGS,
                "the arguments do not match the method's signature",
            )
        })
    }
}

/// One argument's Rust type.
pub(super) trait FromValue: Sized {
    fn from_value(value: Value) -> Option<Self>;
}

/// `s`, and `o` (the signature was checked already, so a handler that
/// takes an object path decodes it as its text).
impl FromValue for String {
    fn from_value(value: Value) -> Option<String> {
        match value {
            Value::String(s) | Value::ObjectPath(s) => Some(s),
            _ => None,
        }
    }
}

impl FromValue for u32 {
    fn from_value(value: Value) -> Option<u32> {
        match value {
            Value::Uint32(v) => Some(v),
            _ => None,
        }
    }
}

impl FromValue for Value {
    fn from_value(value: Value) -> Option<Value> {
        Some(value)
    }
}

/// `as`
impl FromValue for Vec<String> {
    fn from_value(value: Value) -> Option<Vec<String>> {
        match value {
            Value::Array { items, .. } => items.into_iter().map(String::from_value).collect(),
            _ => None,
        }
    }
}

/// `a{ss}`, in order.
impl FromValue for Vec<(String, String)> {
    fn from_value(value: Value) -> Option<Vec<(String, String)>> {
        let Value::Array { items, .. } = value else {
            return None;
        };
        items
            .into_iter()
            .map(|item| match item {
                Value::DictEntry(k, v) => Some((String::from_value(*k)?, String::from_value(*v)?)),
                _ => None,
            })
            .collect()
    }
}

impl<A: FromValue, B: FromValue, C: FromValue, D: FromValue> FromArgs for (A, B, C, D) {
    fn from_args(values: Vec<Value>) -> Option<(A, B, C, D)> {
        let [a, b, c, d] = <[Value; 4]>::try_from(values).ok()?;
        Some((
            A::from_value(a)?,
            B::from_value(b)?,
            C::from_value(c)?,
            D::from_value(d)?,
        ))
    }
}

/// A method's whole argument list as a tuple of Rust types.
pub(super) trait FromArgs: Sized {
    fn from_args(values: Vec<Value>) -> Option<Self>;
}

impl FromArgs for () {
    fn from_args(values: Vec<Value>) -> Option<()> {
        values.is_empty().then_some(())
    }
}

impl<A: FromValue> FromArgs for (A,) {
    fn from_args(values: Vec<Value>) -> Option<(A,)> {
        let [a] = <[Value; 1]>::try_from(values).ok()?;
        Some((A::from_value(a)?,))
    }
}

impl<A: FromValue, B: FromValue> FromArgs for (A, B) {
    fn from_args(values: Vec<Value>) -> Option<(A, B)> {
        let [a, b] = <[Value; 2]>::try_from(values).ok()?;
        Some((A::from_value(a)?, B::from_value(b)?))
    }
}

impl<A: FromValue, B: FromValue, C: FromValue> FromArgs for (A, B, C) {
    fn from_args(values: Vec<Value>) -> Option<(A, B, C)> {
        let [a, b, c] = <[Value; 3]>::try_from(values).ok()?;
        Some((A::from_value(a)?, B::from_value(b)?, C::from_value(c)?))
    }
}
