//! Finding where a message ends in a byte stream.

use crate::{Endian, Error, ErrorKind, MAX_ARRAY_LEN, MAX_MESSAGE_SIZE};

/// Bytes of the fixed header plus the header field array's length.
pub const MIN_HEADER_LEN: usize = 16;

/// Total length of the message whose first bytes are `prefix` (needs 16
/// bytes), `Ok(None)` if fewer than 16 bytes. Errors on a bad endianness
/// byte, a protocol version other than 1, or a total over MAX_MESSAGE_SIZE.
pub fn frame_length(prefix: &[u8]) -> Result<Option<usize>, Error> {
    let Some(fixed) = prefix.get(..MIN_HEADER_LEN) else {
        return Ok(None);
    };
    let endian = Endian::from_byte(fixed[0])?;
    if fixed[3] != 1 {
        return Err(Error::new(
            ErrorKind::BadVersion,
            "protocol version is not 1",
        ));
    }
    let word = |at: usize| {
        let bytes = [fixed[at], fixed[at + 1], fixed[at + 2], fixed[at + 3]];
        match endian {
            Endian::Little => u32::from_le_bytes(bytes),
            Endian::Big => u32::from_be_bytes(bytes),
        }
    };
    let body_len = u64::from(word(4));
    let fields_len = u64::from(word(12));
    if fields_len > MAX_ARRAY_LEN as u64 {
        return Err(Error::too_large("header field array longer than 64 MiB"));
    }
    let total = (MIN_HEADER_LEN as u64 + fields_len).next_multiple_of(8) + body_len;
    if total > MAX_MESSAGE_SIZE as u64 {
        return Err(Error::too_large("message longer than 128 MiB"));
    }
    Ok(Some(total as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(endian: u8, version: u8, body: u32, fields: u32) -> Vec<u8> {
        let mut p = vec![endian, 1, 0, version];
        let le = endian == b'l';
        let put = |p: &mut Vec<u8>, v: u32| {
            p.extend_from_slice(&if le { v.to_le_bytes() } else { v.to_be_bytes() })
        };
        put(&mut p, body);
        put(&mut p, 7);
        put(&mut p, fields);
        p
    }

    #[test]
    fn needs_sixteen_bytes() {
        let p = prefix(b'l', 1, 0, 0);
        for n in 0..16 {
            assert_eq!(frame_length(&p[..n]).unwrap(), None);
        }
        assert_eq!(frame_length(&p).unwrap(), Some(16));
    }

    #[test]
    fn pads_header_to_eight() {
        assert_eq!(frame_length(&prefix(b'l', 1, 5, 1)).unwrap(), Some(24 + 5));
        assert_eq!(frame_length(&prefix(b'l', 1, 5, 8)).unwrap(), Some(24 + 5));
        assert_eq!(frame_length(&prefix(b'l', 1, 5, 9)).unwrap(), Some(32 + 5));
        assert_eq!(
            frame_length(&prefix(b'B', 1, 300, 9)).unwrap(),
            Some(32 + 300)
        );
    }

    #[test]
    fn rejects_bad_endian_and_version() {
        assert_eq!(
            frame_length(&prefix(b'x', 1, 0, 0)).unwrap_err().kind(),
            ErrorKind::BadEndian
        );
        assert_eq!(
            frame_length(&prefix(b'l', 2, 0, 0)).unwrap_err().kind(),
            ErrorKind::BadVersion
        );
    }

    #[test]
    fn size_limit() {
        let max = MAX_MESSAGE_SIZE as u32;
        assert_eq!(
            frame_length(&prefix(b'l', 1, max - 16, 0)).unwrap(),
            Some(MAX_MESSAGE_SIZE)
        );
        assert_eq!(
            frame_length(&prefix(b'l', 1, max - 15, 0))
                .unwrap_err()
                .kind(),
            ErrorKind::TooLarge
        );
        assert!(frame_length(&prefix(b'B', 1, u32::MAX, u32::MAX)).is_err());
        assert!(frame_length(&prefix(b'l', 1, 0, MAX_ARRAY_LEN as u32 + 1)).is_err());
    }
}
