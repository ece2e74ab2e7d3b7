//! Turning a D-Bus address list into a connected socket: each entry is
//! tried in order, the first that connects wins.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::PathBuf;

use quickbus_wire::address::{parse_addresses, AddressError, UnixAddress};

use crate::error::Error;

/// Where one address entry points, for the transports we support.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

/// Connect to the first entry of `address` (a `;`-separated list) that
/// accepts. Entries of unsupported transports are skipped; if none
/// connects, the last connect error is returned.
pub(crate) fn connect_any(address: &str) -> Result<UnixStream, Error> {
    let targets = targets(address)?;
    let mut last_error = None;
    for target in targets {
        match connect(&target) {
            Ok(stream) => return Ok(stream),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| Error::NoSupportedAddress(address.to_owned())))
}

fn connect(target: &Target) -> Result<UnixStream, Error> {
    let (shown, result) = match target {
        Target::Path(path) => (
            format!("unix:path={}", path.display()),
            UnixStream::connect(path),
        ),
        Target::Abstract(name) => (
            format!("unix:abstract={}", String::from_utf8_lossy(name)),
            SocketAddr::from_abstract_name(name).and_then(|a| UnixStream::connect_addr(&a)),
        ),
    };
    result.map_err(|source| Error::Connect {
        address: shown,
        source,
    })
}

/// The connectable unix entries of an address list, in order. Entries of
/// other transports and listen-only unix entries (tmpdir=, dir=,
/// runtime=) are skipped; a malformed entry is an error.
fn targets(address: &str) -> Result<Vec<Target>, Error> {
    let invalid = |e: AddressError| Error::Address {
        address: address.to_owned(),
        reason: e.to_string(),
    };
    let entries = parse_addresses(address).map_err(invalid)?;
    let mut targets = Vec::new();
    for entry in &entries {
        if entry.transport() != "unix" {
            continue;
        }
        match UnixAddress::try_from(entry).map_err(invalid)? {
            UnixAddress::Path(path) => targets.push(Target::Path(path)),
            UnixAddress::Abstract(name) => targets.push(Target::Abstract(name)),
            UnixAddress::Tmpdir(_) | UnixAddress::Dir(_) | UnixAddress::Runtime => {}
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn unix_path_and_abstract_entries_are_kept_in_order() {
        let got = targets("tcp:host=x,port=1;unix:abstract=/tmp/a;unix:path=/run/b%20c").unwrap();
        assert_eq!(
            got,
            vec![
                Target::Abstract(b"/tmp/a".to_vec()),
                Target::Path("/run/b c".into())
            ]
        );
    }

    #[test]
    fn listen_only_entries_are_skipped_and_bad_unix_entries_refused() {
        assert_eq!(
            targets("unix:tmpdir=/tmp;unix:runtime=yes").unwrap(),
            vec![]
        );
        assert!(matches!(
            targets("unix:path=/a,abstract=b"),
            Err(Error::Address { .. })
        ));
        assert!(matches!(
            targets("unix:guid=00"),
            Err(Error::Address { .. })
        ));
    }

    #[test]
    fn only_unsupported_entries_is_an_error() {
        assert!(matches!(
            connect_any("tcp:host=localhost,port=1"),
            Err(Error::NoSupportedAddress(_))
        ));
    }

    #[test]
    fn malformed_address_is_an_error() {
        assert!(matches!(connect_any("nocolon"), Err(Error::Address { .. })));
    }

    #[test]
    fn first_working_entry_is_used() {
        let dir = std::env::temp_dir().join(format!("qb-client-addr-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        let _listener = UnixListener::bind(&good).unwrap();
        let list = format!(
            "unix:path={}/missing;unix:path={}",
            dir.display(),
            good.display()
        );
        assert!(connect_any(&list).is_ok());
        let err = connect_any(&format!("unix:path={}/missing", dir.display())).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn abstract_sockets_connect() {
        let name = format!("quickbus-client-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let _listener = UnixListener::bind_addr(&addr).unwrap();
        assert!(connect_any(&format!("unix:abstract={name}")).is_ok());
    }
}
