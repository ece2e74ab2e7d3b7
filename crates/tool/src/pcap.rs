//! Classic pcap files of D-Bus messages (link type 231), as dbus-monitor
//! `--pcap` and Bustle write them: one whole message per record, never
//! truncated (the snap length is the spec's largest message, 128 MiB).

use std::io::{self, Read, Write};
use std::time::{Duration, SystemTime};

/// LINKTYPE_DBUS in tcpdump.org's list.
pub const LINKTYPE_DBUS: u32 = 231;
const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const SNAPLEN: u32 = quickbus_wire::MAX_MESSAGE_SIZE as u32;

/// Writes the file header, then one record per message.
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut header = Vec::with_capacity(24);
        header.extend_from_slice(&MAGIC_MICROS.to_le_bytes());
        header.extend_from_slice(&2u16.to_le_bytes());
        header.extend_from_slice(&4u16.to_le_bytes());
        header.extend_from_slice(&0i32.to_le_bytes()); // times are UTC
        header.extend_from_slice(&0u32.to_le_bytes()); // no accuracy claim
        header.extend_from_slice(&SNAPLEN.to_le_bytes());
        header.extend_from_slice(&LINKTYPE_DBUS.to_le_bytes());
        out.write_all(&header)?;
        Ok(PcapWriter { out })
    }

    /// One message, whole, stamped with the time it was seen.
    pub fn write(&mut self, time: SystemTime, message: &[u8]) -> io::Result<()> {
        let since = time
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let len = u32::try_from(message.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message over 4 GiB"))?;
        let mut record = [0u8; 16];
        // pcap's seconds field is 32 bits: fine until 2106.
        record[0..4].copy_from_slice(&(since.as_secs() as u32).to_le_bytes());
        record[4..8].copy_from_slice(&since.subsec_micros().to_le_bytes());
        record[8..12].copy_from_slice(&len.to_le_bytes());
        record[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&record)?;
        self.out.write_all(message)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub time: SystemTime,
    pub data: Vec<u8>,
    /// The message's length before any truncation by the writer.
    pub original_len: u32,
}

/// Reads pcap files of either byte order and time resolution.
pub struct PcapReader<R: Read> {
    input: R,
    big_endian: bool,
    nanos: bool,
    pub link_type: u32,
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl<R: Read> PcapReader<R> {
    pub fn new(mut input: R) -> io::Result<Self> {
        let mut header = [0u8; 24];
        input
            .read_exact(&mut header)
            .map_err(|_| bad("not a pcap file: shorter than a pcap header".into()))?;
        let magic_le = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let magic_be = u32::from_be_bytes(header[0..4].try_into().expect("4 bytes"));
        let (big_endian, nanos) = match (magic_le, magic_be) {
            (MAGIC_MICROS, _) => (false, false),
            (MAGIC_NANOS, _) => (false, true),
            (_, MAGIC_MICROS) => (true, false),
            (_, MAGIC_NANOS) => (true, true),
            _ => {
                return Err(bad(format!(
                    "not a pcap file (magic {magic_le:#010x}); pcapng is not supported"
                )))
            }
        };
        let mut reader = PcapReader {
            input,
            big_endian,
            nanos,
            link_type: 0,
        };
        reader.link_type = reader.u32_at(&header, 20);
        Ok(reader)
    }

    fn u32_at(&self, bytes: &[u8], at: usize) -> u32 {
        let b: [u8; 4] = bytes[at..at + 4].try_into().expect("4 bytes");
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// The next record; None at a clean end of file.
    pub fn next_record(&mut self) -> io::Result<Option<Record>> {
        let mut header = [0u8; 16];
        let mut got = 0;
        while got < header.len() {
            match self.input.read(&mut header[got..])? {
                0 if got == 0 => return Ok(None),
                0 => return Err(bad("pcap file ends inside a record header".into())),
                n => got += n,
            }
        }
        let secs = self.u32_at(&header, 0);
        let frac = self.u32_at(&header, 4);
        let incl = self.u32_at(&header, 8);
        let original_len = self.u32_at(&header, 12);
        if incl > SNAPLEN {
            return Err(bad(format!(
                "pcap record of {incl} bytes is implausibly large"
            )));
        }
        let mut data = vec![0u8; incl as usize];
        self.input
            .read_exact(&mut data)
            .map_err(|_| bad("pcap file ends inside a record".into()))?;
        let frac = if self.nanos {
            Duration::from_nanos(frac.into())
        } else {
            Duration::from_micros(frac.into())
        };
        Ok(Some(Record {
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(secs.into()) + frac,
            data,
            original_len,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_whole() {
        let mut writer = PcapWriter::new(Vec::new()).unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_250_000);
        let big = vec![7u8; 100_000];
        writer.write(t, b"hello").unwrap();
        writer.write(t + Duration::from_secs(1), &big).unwrap();
        let bytes = writer.into_inner();
        assert_eq!(&bytes[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes(bytes[20..24].try_into().unwrap()), 231);
        assert_eq!(
            u32::from_le_bytes(bytes[16..20].try_into().unwrap()),
            1 << 27
        );
        let mut reader = PcapReader::new(&bytes[..]).unwrap();
        assert_eq!(reader.link_type, LINKTYPE_DBUS);
        let first = reader.next_record().unwrap().unwrap();
        assert_eq!(
            (first.time, &first.data[..], first.original_len),
            (t, &b"hello"[..], 5)
        );
        let second = reader.next_record().unwrap().unwrap();
        assert_eq!(second.data, big);
        assert_eq!(second.original_len, 100_000);
        assert_eq!(reader.next_record().unwrap(), None);
    }

    #[test]
    fn big_endian_and_nanosecond_files_are_read() {
        let mut file = Vec::new();
        file.extend_from_slice(&MAGIC_NANOS.to_be_bytes());
        file.extend_from_slice(&[0, 2, 0, 4]);
        file.extend_from_slice(&[0; 8]);
        file.extend_from_slice(&SNAPLEN.to_be_bytes());
        file.extend_from_slice(&LINKTYPE_DBUS.to_be_bytes());
        for v in [10u32, 500, 2, 2] {
            file.extend_from_slice(&v.to_be_bytes());
        }
        file.extend_from_slice(b"ab");
        let mut reader = PcapReader::new(&file[..]).unwrap();
        let r = reader.next_record().unwrap().unwrap();
        assert_eq!(
            r.time,
            SystemTime::UNIX_EPOCH + Duration::from_secs(10) + Duration::from_nanos(500)
        );
        assert_eq!(r.data, b"ab");
    }

    #[test]
    fn damaged_files_are_errors() {
        assert!(PcapReader::new(&b"short"[..]).is_err());
        assert!(PcapReader::new(&[0u8; 24][..]).is_err());
        let mut writer = PcapWriter::new(Vec::new()).unwrap();
        writer.write(SystemTime::UNIX_EPOCH, b"hello").unwrap();
        let bytes = writer.into_inner();
        let cut = &bytes[..bytes.len() - 2];
        let mut reader = PcapReader::new(cut).unwrap();
        let err = reader.next_record().unwrap_err();
        assert!(err.to_string().contains("inside a record"), "{err}");
        let mut reader = PcapReader::new(&bytes[..30]).unwrap();
        assert!(reader.next_record().is_err());
    }
}
