//! Type signatures: validation against the spec's limits, and splitting an
//! already validated signature into complete types.

use crate::Error;

/// Longest signature, in bytes.
pub const MAX_SIGNATURE_LEN: usize = 255;
/// Most array type codes one complete type may nest.
pub const MAX_ARRAY_DEPTH: u32 = 32;
/// Most structs (dict entries count as structs) one complete type may nest.
pub const MAX_STRUCT_DEPTH: u32 = 32;
/// Most containers (arrays, structs, dict entries, variants) a value may nest.
pub const MAX_TOTAL_DEPTH: u32 = 64;

/// Basic types: the only types a dict entry key may have.
pub(crate) fn is_basic(code: u8) -> bool {
    matches!(
        code,
        b'y' | b'b' | b'n' | b'q' | b'i' | b'u' | b'x' | b't' | b'd' | b's' | b'o' | b'g' | b'h'
    )
}

/// Alignment of the type starting with `code` (1 for anything unknown).
pub(crate) fn alignment(code: u8) -> usize {
    match code {
        b'n' | b'q' => 2,
        b'b' | b'i' | b'u' | b'h' | b's' | b'o' | b'a' => 4,
        b'x' | b't' | b'd' | b'(' | b'{' => 8,
        _ => 1,
    }
}

/// Size of a fixed-size type whose values need no check beyond their size
/// (booleans and fds have value rules, so they are not listed).
pub(crate) fn plain_fixed_size(code: u8) -> Option<usize> {
    match code {
        b'y' => Some(1),
        b'n' | b'q' => Some(2),
        b'i' | b'u' => Some(4),
        b'x' | b't' | b'd' => Some(8),
        _ => None,
    }
}

/// Room for one end offset per signature byte.
pub(crate) type EndTable = [u8; MAX_SIGNATURE_LEN];

/// A validated signature with, for each position where a complete type
/// starts, the offset where it ends: walking a type is then O(1) per step
/// however deeply it nests, which keeps validation linear in the data.
#[derive(Clone, Copy)]
pub(crate) struct Parsed<'s> {
    bytes: &'s [u8],
    ends: &'s [u8],
}

/// End table of every one-byte signature.
const ONE: &[u8] = &[1];

impl<'s> Parsed<'s> {
    /// Zero or more complete types, validated; `table` holds the ends.
    pub(crate) fn new(sig: &'s [u8], table: &'s mut EndTable) -> Result<Parsed<'s>, Error> {
        if sig.len() == 1 && (is_basic(sig[0]) || sig[0] == b'v') {
            return Ok(Parsed {
                bytes: sig,
                ends: ONE,
            });
        }
        if sig.len() > MAX_SIGNATURE_LEN {
            return Err(Error::signature("signature longer than 255 bytes"));
        }
        let mut pos = 0;
        while pos < sig.len() {
            pos = parse_complete(sig, pos, 0, 0, table)?;
        }
        Ok(Parsed {
            bytes: sig,
            ends: &table[..],
        })
    }

    /// Exactly one complete type, validated.
    pub(crate) fn single(sig: &'s [u8], table: &'s mut EndTable) -> Result<Parsed<'s>, Error> {
        if sig.is_empty() {
            return Err(Error::signature("empty signature where one type is needed"));
        }
        let parsed = Parsed::new(sig, table)?;
        if parsed.end(0) != sig.len() {
            return Err(Error::signature("more than one complete type"));
        }
        Ok(parsed)
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Type code at `at` (0 past the end).
    pub(crate) fn code(&self, at: usize) -> u8 {
        self.bytes.get(at).copied().unwrap_or(0)
    }

    /// End of the complete type starting at `at` (0 if none starts there).
    pub(crate) fn end(&self, at: usize) -> usize {
        self.ends.get(at).copied().unwrap_or(0) as usize
    }

    /// The complete type starting at `at`, as bytes.
    pub(crate) fn type_at(&self, at: usize) -> &'s [u8] {
        self.bytes.get(at..self.end(at)).unwrap_or_default()
    }
}

/// Zero or more complete types within every limit.
pub(crate) fn validate(sig: &[u8]) -> Result<(), Error> {
    Parsed::new(sig, &mut [0; MAX_SIGNATURE_LEN]).map(|_| ())
}

/// Exactly one complete type within every limit.
pub(crate) fn validate_single(sig: &[u8]) -> Result<(), Error> {
    Parsed::single(sig, &mut [0; MAX_SIGNATURE_LEN]).map(|_| ())
}

/// End of the complete type starting at `pos`, checking it fully and
/// recording it in `ends`. Recursion is bounded by the depth limits.
fn parse_complete(
    sig: &[u8],
    pos: usize,
    arrays: u32,
    structs: u32,
    ends: &mut EndTable,
) -> Result<usize, Error> {
    let end = parse_complete_inner(sig, pos, arrays, structs, ends)?;
    if let Some(slot) = ends.get_mut(pos) {
        // Signatures are at most 255 bytes, so `end` fits.
        *slot = end as u8;
    }
    Ok(end)
}

fn parse_complete_inner(
    sig: &[u8],
    pos: usize,
    arrays: u32,
    structs: u32,
    ends: &mut EndTable,
) -> Result<usize, Error> {
    let Some(&code) = sig.get(pos) else {
        return Err(Error::signature("incomplete type in signature"));
    };
    if is_basic(code) || code == b'v' {
        return Ok(pos + 1);
    }
    match code {
        b'a' => {
            if arrays >= MAX_ARRAY_DEPTH {
                return Err(Error::signature("more than 32 nested arrays"));
            }
            if sig.get(pos + 1) == Some(&b'{') {
                let end = parse_dict_entry(sig, pos + 1, arrays + 1, structs, ends)?;
                if let Some(slot) = ends.get_mut(pos + 1) {
                    *slot = end as u8;
                }
                Ok(end)
            } else {
                parse_complete(sig, pos + 1, arrays + 1, structs, ends)
            }
        }
        b'(' => {
            if structs >= MAX_STRUCT_DEPTH {
                return Err(Error::signature("more than 32 nested structs"));
            }
            let mut p = pos + 1;
            if sig.get(p) == Some(&b')') {
                return Err(Error::signature("empty struct"));
            }
            loop {
                match sig.get(p) {
                    Some(b')') => return Ok(p + 1),
                    None => return Err(Error::signature("unclosed struct")),
                    Some(_) => p = parse_complete(sig, p, arrays, structs + 1, ends)?,
                }
            }
        }
        b'{' => Err(Error::signature("dict entry outside an array")),
        b')' | b'}' => Err(Error::signature("unbalanced closing bracket")),
        _ => Err(Error::signature("unknown type code in signature")),
    }
}

/// `{` at `pos`: a basic key, one complete value type, `}`.
fn parse_dict_entry(
    sig: &[u8],
    pos: usize,
    arrays: u32,
    structs: u32,
    ends: &mut EndTable,
) -> Result<usize, Error> {
    if structs >= MAX_STRUCT_DEPTH {
        return Err(Error::signature("more than 32 nested structs"));
    }
    match sig.get(pos + 1) {
        Some(&key) if is_basic(key) => {}
        Some(b'}') => return Err(Error::signature("empty dict entry")),
        _ => return Err(Error::signature("dict entry key must be a basic type")),
    }
    parse_complete(sig, pos + 1, arrays, structs + 1, ends)?;
    let end = parse_complete(sig, pos + 2, arrays, structs + 1, ends)?;
    if sig.get(end) != Some(&b'}') {
        return Err(Error::signature("dict entry must have exactly two types"));
    }
    Ok(end + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> bool {
        validate(s.as_bytes()).is_ok()
    }

    #[test]
    fn valid_signatures() {
        for s in [
            "",
            "y",
            "ybnqiuxtdsogh",
            "v",
            "as",
            "aay",
            "a{sv}",
            "a{ya{sv}}",
            "(i)",
            "(ii(s)a(yy))",
            "a(yv)",
            "a{oa{sa{sv}}}",
        ] {
            assert!(ok(s), "{s}");
        }
    }

    #[test]
    fn invalid_signatures() {
        for s in [
            "a", "aa", "(", ")", "()", "(i", "i)", "{sv}", "a{}", "a{s}", "a{svs}", "a{vs}",
            "a{(i)s}", "a{asv}", "z", "a(", "((i)", "{", "}", "a{sv", "ss}", "\0",
        ] {
            assert!(!ok(s), "{s:?}");
        }
    }

    #[test]
    fn length_limit() {
        assert!(ok(&"y".repeat(255)));
        assert!(!ok(&"y".repeat(256)));
    }

    #[test]
    fn array_depth_limit() {
        let at_limit = format!("{}y", "a".repeat(32));
        let over = format!("{}y", "a".repeat(33));
        assert!(ok(&at_limit));
        assert!(!ok(&over));
    }

    #[test]
    fn struct_depth_limit() {
        let at_limit = format!("{}y{}", "(".repeat(32), ")".repeat(32));
        let over = format!("{}y{}", "(".repeat(33), ")".repeat(33));
        assert!(ok(&at_limit));
        assert!(!ok(&over));
    }

    #[test]
    fn dict_entries_count_as_structs() {
        let at_limit = format!("{}y{}", "a{y".repeat(32), "}".repeat(32));
        let over = format!("{}(y){}", "a{y".repeat(32), "}".repeat(32));
        assert!(ok(&at_limit));
        assert!(!ok(&over));
    }

    #[test]
    fn single_complete_type() {
        assert!(validate_single(b"a{sv}").is_ok());
        assert!(validate_single(b"(ii)").is_ok());
        assert!(validate_single(b"ii").is_err());
        assert!(validate_single(b"").is_err());
        assert!(validate_single(b"a").is_err());
    }

    #[test]
    fn end_table() {
        let mut table = [0; MAX_SIGNATURE_LEN];
        let sig = Parsed::new(b"a{sv}(i(yy))v", &mut table).unwrap();
        let ends: Vec<usize> = (0..sig.len()).map(|at| sig.end(at)).collect();
        // Positions inside a type that no complete type starts at (`}`,
        // `)`) keep 0.
        assert_eq!(ends, [5, 5, 3, 4, 0, 12, 7, 11, 9, 10, 0, 0, 13]);
        assert_eq!(sig.type_at(5), b"(i(yy))");
        assert_eq!(sig.type_at(1), b"{sv}");
        let mut table = [0; MAX_SIGNATURE_LEN];
        assert!(Parsed::single(b"ii", &mut table).is_err());
        let mut table = [0; MAX_SIGNATURE_LEN];
        assert_eq!(Parsed::single(b"s", &mut table).unwrap().end(0), 1);
    }
}
