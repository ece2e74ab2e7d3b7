//! Turning a D-Bus address list into a connected socket: each entry is
//! tried in order, the first that connects wins.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::PathBuf;

use quickbus_wire::address::{parse_addresses, AddressError, Family, TcpAddress, UnixAddress};

use crate::error::Error;
use crate::socket::Socket;

/// Bytes of a nonce-tcp nonce.
const NONCE_LEN: usize = 16;

/// Where one address entry points, for the transports we support.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Path(PathBuf),
    Abstract(Vec<u8>),
    Tcp {
        host: String,
        port: u16,
        family: Option<Family>,
        /// nonce-tcp: the file whose 16 bytes go first.
        noncefile: Option<PathBuf>,
    },
}

/// Connect to the first entry of `address` (a `;`-separated list) that
/// accepts. Entries of unsupported transports are skipped; if none
/// connects, the last connect error is returned.
pub(crate) fn connect_any(address: &str) -> Result<Socket, Error> {
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

fn connect(target: &Target) -> Result<Socket, Error> {
    let (shown, result) = match target {
        Target::Path(path) => (
            format!("unix:path={}", path.display()),
            UnixStream::connect(path).map(Socket::Unix),
        ),
        Target::Abstract(name) => (
            format!("unix:abstract={}", String::from_utf8_lossy(name)),
            SocketAddr::from_abstract_name(name)
                .and_then(|a| UnixStream::connect_addr(&a))
                .map(Socket::Unix),
        ),
        Target::Tcp {
            host,
            port,
            family,
            noncefile,
        } => (
            format!("tcp:host={host},port={port}"),
            connect_tcp(host, *port, *family, noncefile.as_ref()).map(Socket::Tcp),
        ),
    };
    result.map_err(|source| Error::Connect {
        address: shown,
        source,
    })
}

/// The first address of `host` (of `family`, if given) that accepts; for
/// nonce-tcp, the nonce is sent at once, before anything else.
fn connect_tcp(
    host: &str,
    port: u16,
    family: Option<Family>,
    noncefile: Option<&PathBuf>,
) -> std::io::Result<TcpStream> {
    let nonce = match noncefile {
        Some(path) => Some(read_nonce(path)?),
        None => None,
    };
    let mut last_error = None;
    for addr in (host, port).to_socket_addrs()? {
        let wanted = match family {
            None => true,
            Some(Family::Ipv4) => addr.is_ipv4(),
            Some(Family::Ipv6) => addr.is_ipv6(),
        };
        if !wanted {
            continue;
        }
        match TcpStream::connect(addr) {
            Ok(mut stream) => {
                stream.set_nodelay(true)?;
                if let Some(nonce) = &nonce {
                    stream.write_all(nonce)?;
                }
                return Ok(stream);
            }
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no address of {host} in that family"),
        )
    }))
}

/// The 16 bytes of a nonce file.
fn read_nonce(path: &PathBuf) -> std::io::Result<[u8; NONCE_LEN]> {
    let mut nonce = [0u8; NONCE_LEN];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut nonce))
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("reading the nonce file {}: {e}", path.display()),
            )
        })?;
    Ok(nonce)
}

/// The connectable entries of an address list, in order. Entries of other
/// transports and listen-only unix entries (tmpdir=, dir=, runtime=) are
/// skipped; a malformed entry is an error, as is a tcp entry without host
/// or port, or a nonce-tcp one without noncefile.
fn targets(address: &str) -> Result<Vec<Target>, Error> {
    let invalid = |e: AddressError| Error::Address {
        address: address.to_owned(),
        reason: e.to_string(),
    };
    let entries = parse_addresses(address).map_err(invalid)?;
    let mut targets = Vec::new();
    for entry in &entries {
        match entry.transport() {
            "unix" => match UnixAddress::try_from(entry).map_err(invalid)? {
                UnixAddress::Path(path) => targets.push(Target::Path(path)),
                UnixAddress::Abstract(name) => targets.push(Target::Abstract(name)),
                UnixAddress::Tmpdir(_) | UnixAddress::Dir(_) | UnixAddress::Runtime => {}
            },
            "tcp" | "nonce-tcp" => {
                let tcp = TcpAddress::try_from(entry).map_err(invalid)?;
                let missing = |expected| {
                    invalid(AddressError::MissingKey {
                        transport: entry.transport().to_owned(),
                        expected,
                    })
                };
                let host = tcp.host.ok_or_else(|| missing("host"))?;
                let port = tcp
                    .port
                    .filter(|&p| p != 0)
                    .ok_or_else(|| missing("port"))?;
                if tcp.nonce && tcp.noncefile.is_none() {
                    return Err(missing("noncefile"));
                }
                targets.push(Target::Tcp {
                    host,
                    port,
                    family: tcp.family,
                    noncefile: tcp.noncefile,
                });
            }
            _ => {}
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
        let got = targets("launchd:env=X;unix:abstract=/tmp/a;unix:path=/run/b%20c").unwrap();
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
            connect_any("launchd:env=X"),
            Err(Error::NoSupportedAddress(_))
        ));
    }

    #[test]
    fn tcp_entries_need_host_port_and_for_nonce_tcp_a_noncefile() {
        assert_eq!(
            targets("tcp:host=127.0.0.1,port=4242,family=ipv4").unwrap(),
            vec![Target::Tcp {
                host: "127.0.0.1".into(),
                port: 4242,
                family: Some(Family::Ipv4),
                noncefile: None
            }]
        );
        for bad in [
            "tcp:port=1",
            "tcp:host=x",
            "tcp:host=x,port=0",
            "nonce-tcp:host=x,port=1",
        ] {
            assert!(matches!(targets(bad), Err(Error::Address { .. })), "{bad}");
        }
    }

    #[test]
    fn nonce_tcp_sends_the_nonce_first() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("qb-client-nonce-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("nonce");
        std::fs::write(&file, b"0123456789abcdef").unwrap();
        let address = format!(
            "nonce-tcp:host=127.0.0.1,port={port},noncefile={}",
            file.display()
        );
        let socket = connect_any(&address).unwrap();
        assert!(!socket.is_unix());
        let (mut accepted, _) = listener.accept().unwrap();
        let mut got = [0u8; 16];
        accepted.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"0123456789abcdef");
        std::fs::remove_dir_all(&dir).unwrap();
        let missing = format!("nonce-tcp:host=127.0.0.1,port={port},noncefile=/nonexistent");
        assert!(connect_any(&missing).is_err());
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
