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

/// Zero or more complete types within every limit.
pub(crate) fn validate(sig: &[u8]) -> Result<(), Error> {
    if sig.len() > MAX_SIGNATURE_LEN {
        return Err(Error::signature("signature longer than 255 bytes"));
    }
    let mut pos = 0;
    while pos < sig.len() {
        pos = parse_complete(sig, pos, 0, 0)?;
    }
    Ok(())
}

/// Exactly one complete type within every limit.
pub(crate) fn validate_single(sig: &[u8]) -> Result<(), Error> {
    if sig.len() > MAX_SIGNATURE_LEN {
        return Err(Error::signature("signature longer than 255 bytes"));
    }
    if sig.is_empty() {
        return Err(Error::signature("empty signature where one type is needed"));
    }
    if parse_complete(sig, 0, 0, 0)? != sig.len() {
        return Err(Error::signature("more than one complete type"));
    }
    Ok(())
}

/// End of the complete type starting at `pos`, checking it fully.
/// Recursion is bounded by the depth limits (64 levels).
fn parse_complete(sig: &[u8], pos: usize, arrays: u32, structs: u32) -> Result<usize, Error> {
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
                parse_dict_entry(sig, pos + 1, arrays + 1, structs)
            } else {
                parse_complete(sig, pos + 1, arrays + 1, structs)
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
                    Some(_) => p = parse_complete(sig, p, arrays, structs + 1)?,
                }
            }
        }
        b'{' => Err(Error::signature("dict entry outside an array")),
        b')' | b'}' => Err(Error::signature("unbalanced closing bracket")),
        _ => Err(Error::signature("unknown type code in signature")),
    }
}

/// `{` at `pos`: a basic key, one complete value type, `}`.
fn parse_dict_entry(sig: &[u8], pos: usize, arrays: u32, structs: u32) -> Result<usize, Error> {
    if structs >= MAX_STRUCT_DEPTH {
        return Err(Error::signature("more than 32 nested structs"));
    }
    match sig.get(pos + 1) {
        Some(&key) if is_basic(key) => {}
        Some(b'}') => return Err(Error::signature("empty dict entry")),
        _ => return Err(Error::signature("dict entry key must be a basic type")),
    }
    let end = parse_complete(sig, pos + 2, arrays, structs + 1)?;
    if sig.get(end) != Some(&b'}') {
        return Err(Error::signature("dict entry must have exactly two types"));
    }
    Ok(end + 1)
}

/// Length of the first complete type of an already validated signature.
/// Never panics; a malformed input gives an error instead.
pub(crate) fn first_len(sig: &[u8]) -> Result<usize, Error> {
    let mut depth = 0usize;
    for (i, &c) in sig.iter().enumerate() {
        match c {
            b'a' => continue,
            b'(' | b'{' => depth += 1,
            b')' | b'}' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| Error::signature("unbalanced signature"))?;
            }
            _ => {}
        }
        if depth == 0 {
            return Ok(i + 1);
        }
    }
    Err(Error::signature("incomplete type in signature"))
}

/// Iterator over the complete types of an already validated signature.
pub(crate) struct CompleteTypes<'a> {
    rest: &'a [u8],
}

impl<'a> CompleteTypes<'a> {
    pub(crate) fn new(sig: &'a [u8]) -> CompleteTypes<'a> {
        CompleteTypes { rest: sig }
    }
}

impl<'a> Iterator for CompleteTypes<'a> {
    type Item = Result<&'a [u8], Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match first_len(self.rest) {
            Ok(len) => {
                let (first, rest) = self.rest.split_at(len);
                self.rest = rest;
                Some(Ok(first))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
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
    fn splits_complete_types() {
        let types: Vec<&[u8]> = CompleteTypes::new(b"ia{sv}(yv)aas")
            .map(|t| t.unwrap())
            .collect();
        assert_eq!(types, [&b"i"[..], b"a{sv}", b"(yv)", b"aas"]);
        assert!(first_len(b"a").is_err());
        assert!(first_len(b")").is_err());
    }
}
