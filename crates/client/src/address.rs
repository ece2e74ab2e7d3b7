//! Turning a D-Bus address list into a connected socket: each entry is
//! tried in order, the first that connects wins.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};

use crate::error::Error;

/// Where one address entry points, for the transports we support.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Path(String),
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
        Target::Path(path) => (format!("unix:path={path}"), UnixStream::connect(path)),
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

/// The supported entries of an address list, in order.
fn targets(address: &str) -> Result<Vec<Target>, Error> {
    let entries = quickbus_wire::address::parse_addresses(address).map_err(|e| Error::Address {
        address: address.to_owned(),
        reason: e.to_string(),
    })?;
    let mut targets = Vec::new();
    for entry in &entries {
        if entry.transport() != "unix" {
            continue;
        }
        if let Some(path) = entry.get("path") {
            targets.push(Target::Path(path.to_owned()));
        } else if let Some(name) = entry.get("abstract") {
            targets.push(Target::Abstract(name.as_bytes().to_vec()));
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
