//! Writing the wire format: aligned primitives and marshalling of [`Value`]s
//! checked against their signature.

use crate::signature::{self, Parsed, MAX_SIGNATURE_LEN, MAX_TOTAL_DEPTH};
use crate::{names, Endian, Error, Value, MAX_ARRAY_LEN, MAX_MESSAGE_SIZE};

/// An output buffer whose offset 0 is 8-aligned in the final message.
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
    endian: Endian,
}

impl Writer {
    pub(crate) fn new(endian: Endian) -> Writer {
        Writer::with_capacity(endian, 0)
    }

    pub(crate) fn with_capacity(endian: Endian, capacity: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(capacity),
            endian,
        }
    }

    pub(crate) fn align(&mut self, n: usize) {
        let next = self.buf.len().next_multiple_of(n);
        self.buf.resize(next, 0);
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub(crate) fn u16(&mut self, v: u16) {
        self.align(2);
        let bytes = match self.endian {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        };
        self.buf.extend_from_slice(&bytes);
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.align(4);
        self.buf.extend_from_slice(&self.u32_bytes(v));
    }

    fn u32_bytes(&self, v: u32) -> [u8; 4] {
        match self.endian {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.align(8);
        let bytes = match self.endian {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        };
        self.buf.extend_from_slice(&bytes);
    }

    /// A string or object path whose content the caller has checked.
    pub(crate) fn string(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    /// A signature (at most 255 bytes, checked by the caller).
    pub(crate) fn signature(&mut self, s: &[u8]) {
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s);
        self.buf.push(0);
    }

    /// Start an array: returns where its length goes and where its first
    /// element starts.
    pub(crate) fn begin_array(&mut self, elem_align: usize) -> (usize, usize) {
        self.u32(0);
        let len_at = self.buf.len() - 4;
        self.align(elem_align);
        (len_at, self.buf.len())
    }

    pub(crate) fn end_array(&mut self, (len_at, start): (usize, usize)) -> Result<(), Error> {
        let len = self.buf.len() - start;
        if len > MAX_ARRAY_LEN {
            return Err(Error::too_large("array longer than 64 MiB"));
        }
        let bytes = self.u32_bytes(len as u32);
        if let Some(slot) = self.buf.get_mut(len_at..len_at + 4) {
            slot.copy_from_slice(&bytes);
        }
        Ok(())
    }

    /// Marshal `value`, which must have the complete type `sig`.
    pub(crate) fn value(&mut self, sig: &[u8], value: &Value, depth: u32) -> Result<(), Error> {
        let mut table = [0; MAX_SIGNATURE_LEN];
        let sig = Parsed::single(sig, &mut table)?;
        self.value_at(&sig, 0, value, depth)
    }

    /// Marshal `value`, which must have the complete type at `at` in `sig`.
    fn value_at(
        &mut self,
        sig: &Parsed<'_>,
        at: usize,
        value: &Value,
        depth: u32,
    ) -> Result<(), Error> {
        match (sig.code(at), value) {
            (b'y', Value::Byte(v)) => self.u8(*v),
            (b'b', Value::Bool(v)) => self.u32(u32::from(*v)),
            (b'n', Value::Int16(v)) => self.u16(*v as u16),
            (b'q', Value::Uint16(v)) => self.u16(*v),
            (b'i', Value::Int32(v)) => self.u32(*v as u32),
            (b'u', Value::Uint32(v)) => self.u32(*v),
            (b'x', Value::Int64(v)) => self.u64(*v as u64),
            (b't', Value::Uint64(v)) => self.u64(*v),
            (b'd', Value::Double(v)) => self.u64(v.to_bits()),
            (b'h', Value::UnixFd(v)) => self.u32(*v),
            (b's', Value::String(s)) => {
                check_string_len(s)?;
                if s.contains('\0') {
                    return Err(Error::value("string contains a NUL byte"));
                }
                self.string(s);
            }
            (b'o', Value::ObjectPath(p)) => {
                check_string_len(p)?;
                if !names::is_valid_object_path(p) {
                    return Err(Error::value(format!("invalid object path {p:?}")));
                }
                self.string(p);
            }
            (b'g', Value::Signature(s)) => {
                signature::validate(s.as_bytes())?;
                self.signature(s.as_bytes());
            }
            (b'a', Value::Array { elem_sig, items }) => {
                let depth = enter(depth)?;
                let elem = at + 1;
                if sig.type_at(elem) != elem_sig.as_bytes() {
                    return Err(Error::value(
                        "array element signature does not match its type",
                    ));
                }
                let array = self.begin_array(signature::alignment(sig.code(elem)));
                if elem_sig == "y" {
                    // Byte arrays are the common bulk payload: no dispatch.
                    self.buf.reserve(items.len());
                    for item in items {
                        let Value::Byte(b) = item else {
                            return Err(Error::value("value does not match its signature"));
                        };
                        self.buf.push(*b);
                    }
                } else {
                    for item in items {
                        self.value_at(sig, elem, item, depth)?;
                    }
                }
                self.end_array(array)?;
            }
            (b'(', Value::Struct(fields)) => {
                let depth = enter(depth)?;
                self.align(8);
                let close = sig.end(at).saturating_sub(1);
                let mut field_at = at + 1;
                for field in fields {
                    if field_at >= close {
                        return Err(Error::value("struct has more fields than its type"));
                    }
                    self.value_at(sig, field_at, field, depth)?;
                    field_at = sig.end(field_at).max(field_at + 1);
                }
                if field_at < close {
                    return Err(Error::value("struct has fewer fields than its type"));
                }
            }
            (b'{', Value::DictEntry(key, val)) => {
                let depth = enter(depth)?;
                self.align(8);
                self.value_at(sig, at + 1, key, depth)?;
                self.value_at(sig, at + 2, val, depth)?;
            }
            (b'v', Value::Variant(inner)) => {
                let depth = enter(depth)?;
                let inner_sig = inner.signature();
                self.signature(inner_sig.as_bytes());
                self.value(inner_sig.as_bytes(), inner, depth)?;
            }
            _ => return Err(Error::value("value does not match its signature")),
        }
        Ok(())
    }
}

/// Keeps the u32 length prefix from wrapping around.
fn check_string_len(s: &str) -> Result<(), Error> {
    if s.len() > MAX_MESSAGE_SIZE {
        return Err(Error::too_large("string longer than a message may be"));
    }
    Ok(())
}

fn enter(depth: u32) -> Result<u32, Error> {
    if depth >= MAX_TOTAL_DEPTH {
        return Err(Error::too_large(
            "values nested more than 64 containers deep",
        ));
    }
    Ok(depth + 1)
}
