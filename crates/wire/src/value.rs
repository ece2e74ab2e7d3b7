//! An owned D-Bus value tree, used to build bodies and to decode them.

/// One D-Bus value of any type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    Int16(i16),
    Uint16(u16),
    Int32(i32),
    Uint32(u32),
    Int64(i64),
    Uint64(u64),
    Double(f64),
    String(String),
    ObjectPath(String),
    Signature(String),
    /// Index into the message's file descriptors.
    UnixFd(u32),
    /// `elem_sig` is the element type even when `items` is empty; a dict
    /// (`a{..}`) has `DictEntry` items.
    Array {
        elem_sig: String,
        items: Vec<Value>,
    },
    Struct(Vec<Value>),
    DictEntry(Box<Value>, Box<Value>),
    Variant(Box<Value>),
}

impl Value {
    /// The type signature of this value.
    pub fn signature(&self) -> String {
        let mut out = String::new();
        self.write_signature(&mut out);
        out
    }

    pub(crate) fn write_signature(&self, out: &mut String) {
        match self {
            Value::Byte(_) => out.push('y'),
            Value::Bool(_) => out.push('b'),
            Value::Int16(_) => out.push('n'),
            Value::Uint16(_) => out.push('q'),
            Value::Int32(_) => out.push('i'),
            Value::Uint32(_) => out.push('u'),
            Value::Int64(_) => out.push('x'),
            Value::Uint64(_) => out.push('t'),
            Value::Double(_) => out.push('d'),
            Value::String(_) => out.push('s'),
            Value::ObjectPath(_) => out.push('o'),
            Value::Signature(_) => out.push('g'),
            Value::UnixFd(_) => out.push('h'),
            Value::Array { elem_sig, .. } => {
                out.push('a');
                out.push_str(elem_sig);
            }
            Value::Struct(fields) => {
                out.push('(');
                for field in fields {
                    field.write_signature(out);
                }
                out.push(')');
            }
            Value::DictEntry(key, value) => {
                out.push('{');
                key.write_signature(out);
                value.write_signature(out);
                out.push('}');
            }
            Value::Variant(_) => out.push('v'),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_of_values() {
        assert_eq!(Value::Byte(1).signature(), "y");
        assert_eq!(Value::UnixFd(0).signature(), "h");
        assert_eq!(
            Value::Array {
                elem_sig: "{sv}".into(),
                items: vec![]
            }
            .signature(),
            "a{sv}"
        );
        assert_eq!(
            Value::Struct(vec![
                Value::Int32(1),
                Value::Variant(Box::new(Value::Bool(true))),
                Value::DictEntry(
                    Box::new(Value::String("k".into())),
                    Box::new(Value::Double(1.0))
                )
            ])
            .signature(),
            "(iv{sd})"
        );
    }
}
