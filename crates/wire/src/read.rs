//! Reading the wire format: aligned primitives and the one-pass walker that
//! validates a value against its signature and, when asked, decodes it.

use crate::signature::{self, Parsed, MAX_SIGNATURE_LEN, MAX_TOTAL_DEPTH};
use crate::{Endian, Error, Value, MAX_ARRAY_LEN};

/// A cursor over message bytes. Offsets are relative to `data`, whose start
/// must be 8-aligned in the message so that alignment is computed right.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    /// Reads stop here: the end of the enclosing array or of the data.
    limit: usize,
    endian: Endian,
}

/// A D-Bus string's contents: UTF-8 without NUL bytes.
pub(crate) fn text(bytes: &[u8]) -> Result<&str, Error> {
    if bytes.contains(&0) {
        return Err(Error::body("string contains a NUL byte"));
    }
    std::str::from_utf8(bytes).map_err(|_| Error::body("string is not UTF-8"))
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8], pos: usize, endian: Endian) -> Reader<'a> {
        Reader {
            data,
            pos,
            limit: data.len(),
            endian,
        }
    }

    /// Where the next read starts, from the start of the data.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.limit
    }

    /// Skip padding up to a multiple of `n`; the padding must be zero.
    pub(crate) fn align(&mut self, n: usize) -> Result<(), Error> {
        let next = self.pos.next_multiple_of(n);
        let padding = self.take(next - self.pos)?;
        if padding.iter().any(|&b| b != 0) {
            return Err(Error::body("non-zero alignment padding"));
        }
        Ok(())
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self.pos.checked_add(n).ok_or_else(Error::truncated)?;
        if end > self.limit {
            return Err(Error::truncated());
        }
        let bytes = self.data.get(self.pos..end).ok_or_else(Error::truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        self.align(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.fixed::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Error> {
        let b = self.fixed::<2>()?;
        Ok(match self.endian {
            Endian::Little => u16::from_le_bytes(b),
            Endian::Big => u16::from_be_bytes(b),
        })
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Error> {
        let b = self.fixed::<4>()?;
        Ok(match self.endian {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        })
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Error> {
        let b = self.fixed::<8>()?;
        Ok(match self.endian {
            Endian::Little => u64::from_le_bytes(b),
            Endian::Big => u64::from_be_bytes(b),
        })
    }

    pub(crate) fn bool(&mut self) -> Result<bool, Error> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Error::body("boolean other than 0 or 1")),
        }
    }

    /// An fd index (`h`). Not checked against the UNIX_FDS field: libdbus
    /// validates bodies without looking at it, so dbus-daemon routes a
    /// message whose index points at no fd and the receiver judges (real
    /// clients send such messages, e.g. dbus-fast's tests).
    pub(crate) fn unix_fd(&mut self) -> Result<u32, Error> {
        self.u32()
    }

    /// A string (`s`): u32 length, UTF-8 bytes without NUL, NUL.
    /// Returns the string and its offset in `data`.
    pub(crate) fn string(&mut self) -> Result<(&'a str, usize), Error> {
        let (bytes, start) = self.string_bytes()?;
        Ok((text(bytes)?, start))
    }

    /// A string's bytes (u32 length, bytes, NUL), not yet checked for
    /// inner NULs or UTF-8: for callers whose own check is stricter.
    pub(crate) fn string_bytes(&mut self) -> Result<(&'a [u8], usize), Error> {
        let len = self.u32()? as usize;
        let start = self.pos;
        let with_nul = self.take(len.checked_add(1).ok_or_else(Error::truncated)?)?;
        let (&last, bytes) = with_nul.split_last().ok_or_else(Error::truncated)?;
        if last != 0 {
            return Err(Error::body("string not NUL terminated"));
        }
        Ok((bytes, start))
    }

    pub(crate) fn object_path(&mut self) -> Result<(&'a str, usize), Error> {
        let (path, start) = self.string()?;
        if !crate::names::is_valid_object_path(path) {
            return Err(Error::body("invalid object path"));
        }
        Ok((path, start))
    }

    /// A signature (`g`): u8 length, bytes, NUL; validated.
    pub(crate) fn signature(&mut self) -> Result<(&'a [u8], usize), Error> {
        let (sig, start) = self.signature_bytes()?;
        signature::validate(sig)?;
        Ok((sig, start))
    }

    /// The bytes of a signature, not yet validated (the caller checks
    /// them, e.g. as exactly one complete type).
    pub(crate) fn signature_bytes(&mut self) -> Result<(&'a [u8], usize), Error> {
        let len = self.u8()? as usize;
        let start = self.pos;
        let with_nul = self.take(len + 1)?;
        let (&last, sig) = with_nul.split_last().ok_or_else(Error::truncated)?;
        if last != 0 {
            return Err(Error::body("signature not NUL terminated"));
        }
        Ok((sig, start))
    }

    /// Validate (and, when `out` is given, decode) one value of the
    /// complete type starting at `at` in `sig`. `depth` counts the
    /// containers around it.
    pub(crate) fn value(
        &mut self,
        sig: &Parsed<'_>,
        at: usize,
        depth: u32,
        out: Option<&mut Vec<Value>>,
    ) -> Result<(), Error> {
        let decoded = match sig.code(at) {
            b'y' => Value::Byte(self.u8()?),
            b'b' => Value::Bool(self.bool()?),
            b'n' => Value::Int16(self.u16()? as i16),
            b'q' => Value::Uint16(self.u16()?),
            b'i' => Value::Int32(self.u32()? as i32),
            b'u' => Value::Uint32(self.u32()?),
            b'x' => Value::Int64(self.u64()? as i64),
            b't' => Value::Uint64(self.u64()?),
            b'd' => Value::Double(f64::from_bits(self.u64()?)),
            b'h' => Value::UnixFd(self.unix_fd()?),
            b's' => {
                let (s, _) = self.string()?;
                if let Some(out) = out {
                    out.push(Value::String(s.to_owned()));
                }
                return Ok(());
            }
            b'o' => {
                let (s, _) = self.object_path()?;
                if let Some(out) = out {
                    out.push(Value::ObjectPath(s.to_owned()));
                }
                return Ok(());
            }
            b'g' => {
                let (s, _) = self.signature()?;
                if let Some(out) = out {
                    out.push(Value::Signature(sig_string(s)?));
                }
                return Ok(());
            }
            b'a' => return self.array(sig, at, enter(depth)?, out),
            b'(' => return self.structure(sig, at, enter(depth)?, out),
            b'{' => return self.dict_entry(sig, at, enter(depth)?, out),
            b'v' => return self.variant(enter(depth)?, out),
            _ => return Err(Error::signature("unknown type code")),
        };
        if let Some(out) = out {
            out.push(decoded);
        }
        Ok(())
    }

    fn array(
        &mut self,
        sig: &Parsed<'_>,
        at: usize,
        depth: u32,
        out: Option<&mut Vec<Value>>,
    ) -> Result<(), Error> {
        let elem = at + 1;
        let elem_code = sig.code(elem);
        let len = self.u32()? as usize;
        if len > MAX_ARRAY_LEN {
            return Err(Error::too_large("array longer than 64 MiB"));
        }
        self.align(signature::alignment(elem_code))?;
        let end = self.pos.checked_add(len).ok_or_else(Error::truncated)?;
        if end > self.limit {
            return Err(Error::truncated());
        }
        match out {
            None => {
                // Fast path: an array of plain fixed-size values needs only
                // its length checked.
                if let Some(size) = signature::plain_fixed_size(elem_code) {
                    if !len.is_multiple_of(size) {
                        return Err(Error::body(
                            "array length not a multiple of its element size",
                        ));
                    }
                    self.pos = end;
                    return Ok(());
                }
                self.elements(sig, elem, end, depth, None)
            }
            Some(out) => {
                let mut items = Vec::new();
                self.elements(sig, elem, end, depth, Some(&mut items))?;
                out.push(Value::Array {
                    elem_sig: sig_string(sig.type_at(elem))?,
                    items,
                });
                Ok(())
            }
        }
    }

    /// Array elements up to exactly `end`.
    fn elements(
        &mut self,
        sig: &Parsed<'_>,
        elem: usize,
        end: usize,
        depth: u32,
        mut out: Option<&mut Vec<Value>>,
    ) -> Result<(), Error> {
        let outer_limit = std::mem::replace(&mut self.limit, end);
        let mut result = Ok(());
        // Every D-Bus value takes at least one byte, so this ends.
        while self.pos < end && result.is_ok() {
            result = self.value(sig, elem, depth, out.as_deref_mut());
        }
        self.limit = outer_limit;
        result
    }

    /// The fields of the struct at `at`, in order.
    fn fields<'s>(sig: Parsed<'s>, at: usize) -> impl Iterator<Item = usize> + 's {
        let close = sig.end(at).saturating_sub(1);
        let mut next = at + 1;
        std::iter::from_fn(move || {
            let field = next;
            let field_end = sig.end(field);
            // A well-formed table always moves forward; stop otherwise.
            if field >= close || field_end <= field {
                return None;
            }
            next = field_end;
            Some(field)
        })
    }

    fn structure(
        &mut self,
        sig: &Parsed<'_>,
        at: usize,
        depth: u32,
        out: Option<&mut Vec<Value>>,
    ) -> Result<(), Error> {
        self.align(8)?;
        match out {
            None => {
                for field in Self::fields(*sig, at) {
                    self.value(sig, field, depth, None)?;
                }
            }
            Some(out) => {
                let mut fields = Vec::new();
                for field in Self::fields(*sig, at) {
                    self.value(sig, field, depth, Some(&mut fields))?;
                }
                out.push(Value::Struct(fields));
            }
        }
        Ok(())
    }

    fn dict_entry(
        &mut self,
        sig: &Parsed<'_>,
        at: usize,
        depth: u32,
        out: Option<&mut Vec<Value>>,
    ) -> Result<(), Error> {
        self.align(8)?;
        let (key, value) = (at + 1, at + 2);
        match out {
            None => {
                self.value(sig, key, depth, None)?;
                self.value(sig, value, depth, None)
            }
            Some(out) => {
                let mut pair = Vec::with_capacity(2);
                self.value(sig, key, depth, Some(&mut pair))?;
                self.value(sig, value, depth, Some(&mut pair))?;
                let value = pair.pop();
                let key = pair.pop();
                match (key, value) {
                    (Some(k), Some(v)) => {
                        out.push(Value::DictEntry(Box::new(k), Box::new(v)));
                        Ok(())
                    }
                    _ => Err(Error::body("dict entry without key and value")),
                }
            }
        }
    }

    fn variant(&mut self, depth: u32, out: Option<&mut Vec<Value>>) -> Result<(), Error> {
        let (bytes, _) = self.signature_bytes()?;
        let mut table = [0; MAX_SIGNATURE_LEN];
        let inner = Parsed::single(bytes, &mut table)
            .map_err(|_| Error::body("variant signature is not one valid complete type"))?;
        match out {
            None => self.value(&inner, 0, depth, None),
            Some(out) => {
                let mut one = Vec::with_capacity(1);
                self.value(&inner, 0, depth, Some(&mut one))?;
                let value = one.pop().ok_or_else(|| Error::body("empty variant"))?;
                out.push(Value::Variant(Box::new(value)));
                Ok(())
            }
        }
    }

    /// Validate every value of the signature `sig`, then require the data
    /// to end exactly there.
    pub(crate) fn values_to_end(
        &mut self,
        sig: &Parsed<'_>,
        mut out: Option<&mut Vec<Value>>,
    ) -> Result<(), Error> {
        let mut at = 0;
        while at < sig.len() {
            self.value(sig, at, 0, out.as_deref_mut())?;
            let next = sig.end(at);
            if next <= at {
                return Err(Error::signature("malformed signature table"));
            }
            at = next;
        }
        if !self.at_end() {
            return Err(Error::body(format!(
                "body is longer than its signature: {} bytes left",
                self.limit - self.pos
            )));
        }
        Ok(())
    }

    /// Step over one value of the type at `at`, already validated at this
    /// position, without checking it again (arrays are jumped over by their
    /// length).
    pub(crate) fn skip(&mut self, sig: &Parsed<'_>, at: usize) -> Result<(), Error> {
        match sig.code(at) {
            b'y' => self.skip_fixed(1),
            b'n' | b'q' => self.skip_fixed(2),
            b'b' | b'i' | b'u' | b'h' => self.skip_fixed(4),
            b'x' | b't' | b'd' => self.skip_fixed(8),
            b's' | b'o' => {
                let len = self.u32()? as usize;
                self.take(len.checked_add(1).ok_or_else(Error::truncated)?)
                    .map(|_| ())
            }
            b'g' => self.signature_bytes().map(|_| ()),
            b'a' => {
                let len = self.u32()? as usize;
                self.skip_padding(signature::alignment(sig.code(at + 1)))?;
                self.take(len).map(|_| ())
            }
            b'(' | b'{' => {
                self.skip_padding(8)?;
                for field in Self::fields(*sig, at) {
                    self.skip(sig, field)?;
                }
                Ok(())
            }
            b'v' => {
                let (bytes, _) = self.signature_bytes()?;
                let mut table = [0; MAX_SIGNATURE_LEN];
                let inner = Parsed::single(bytes, &mut table)?;
                self.skip(&inner, 0)
            }
            _ => Err(Error::signature("unknown type code")),
        }
    }

    fn skip_padding(&mut self, align: usize) -> Result<(), Error> {
        let next = self.pos.next_multiple_of(align);
        self.take(next - self.pos).map(|_| ())
    }

    fn skip_fixed(&mut self, size: usize) -> Result<(), Error> {
        self.skip_padding(size)?;
        self.take(size).map(|_| ())
    }
}

/// One more container level, within the spec's total depth of 64.
fn enter(depth: u32) -> Result<u32, Error> {
    if depth >= MAX_TOTAL_DEPTH {
        return Err(Error::too_large(
            "values nested more than 64 containers deep",
        ));
    }
    Ok(depth + 1)
}

fn sig_string(sig: &[u8]) -> Result<String, Error> {
    std::str::from_utf8(sig)
        .map(str::to_owned)
        .map_err(|_| Error::signature("signature is not ASCII"))
}
