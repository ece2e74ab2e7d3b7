//! Turning `<listen>` / `--address=` addresses into bound sockets, and the
//! sockets systemd hands over (`LISTEN_FDS`).

use std::io;
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr as IpSocketAddr, TcpListener, ToSocketAddrs,
};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};

use quickbus_wire::address::{
    escape_value, parse_addresses, AddressEntry, Family, TcpAddress, UnixAddress,
};

use crate::nonce::{NonceFile, NONCE_LEN};
use crate::socket::ListenSocket;

/// The bound listening sockets of one address and the address clients use
/// to reach them (a tcp host may resolve to several addresses, each with a
/// socket, as in dbus-daemon).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Listener {
    /// Not handed over by a restart: the loop has its own copies.
    #[serde(skip)]
    pub sockets: Vec<ListenSocket>,
    /// The connectable address, escaped, without the guid.
    pub address: String,
    /// A socket file we created and remove on exit.
    pub cleanup: Option<PathBuf>,
    /// nonce-tcp: the nonce every peer must send first (its file goes when
    /// the listener does).
    pub nonce: Option<NonceFile>,
}

impl Listener {
    fn unix(socket: UnixListener, address: String, cleanup: Option<PathBuf>) -> Listener {
        Listener {
            sockets: vec![ListenSocket::Unix(socket)],
            address,
            cleanup,
            nonce: None,
        }
    }

    /// The nonce peers must send first, if any.
    pub fn nonce_bytes(&self) -> Option<[u8; NONCE_LEN]> {
        self.nonce.as_ref().map(NonceFile::nonce)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if crate::restart::trying_the_state() {
            return; // the bus's file, not a restart's trial reader's
        }
        if let Some(path) = &self.cleanup {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Listen on the first entry of a `;`-separated address list that can be
/// bound, as dbus-daemon's `dbus_server_listen` does: an entry that fails
/// to bind (a missing directory, a port in use) gives way to the next, a
/// transport this platform does not have is passed over, and a malformed
/// entry of a known transport stops at once. When nothing listens, the
/// error is the first entry's that failed to bind, else "Unknown address
/// type".
pub fn bind_first(addresses: &str) -> io::Result<Listener> {
    let named = |e: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("address '{addresses}': {e}"),
        )
    };
    let entries = parse_addresses(addresses).map_err(|e| named(&e))?;
    let mut first_failure = None;
    for entry in &entries {
        let bound = match entry.transport() {
            "tcp" | "nonce-tcp" => bind_tcp(&TcpAddress::try_from(entry).map_err(|e| named(&e))?),
            "unix" => bind(&UnixAddress::try_from(entry).map_err(|e| named(&e))?),
            // The sockets systemd passes are taken before any address is
            // bound: here there were none (dbus-daemon's words).
            "systemd" => Err(io::Error::new(
                io::ErrorKind::NotFound,
                "No socket received.",
            )),
            _ => continue,
        };
        match bound {
            Ok(listener) => return Ok(listener),
            Err(e) => {
                first_failure.get_or_insert(e);
            }
        }
    }
    Err(first_failure.unwrap_or_else(|| {
        let transport = entries.first().map_or("", |e| e.transport());
        named(&format!("Unknown address type '{transport}'"))
    }))
}

/// The bus's address, as printed, logged and given to the services it
/// starts: every listener's, each with the guid, `;`-separated. As in
/// dbus-daemon, a later `<listen>` comes first ("later <listen> have
/// priority"); sockets from systemd keep the order systemd passed them in.
pub fn full_address(listeners: &[Listener], from_systemd: bool, guid: &str) -> String {
    let with_guid = |l: &Listener| format!("{},guid={guid}", l.address);
    let entries: Vec<String> = if from_systemd {
        listeners.iter().map(with_guid).collect()
    } else {
        listeners.iter().rev().map(with_guid).collect()
    };
    entries.join(";")
}

/// Listen on a `tcp:` or `nonce-tcp:` address as dbus-daemon does
/// (`_dbus_server_new_for_tcp_socket`): `bind` (default the host, `*` every
/// interface) is resolved and every address it names gets a socket; port 0
/// (the default) lets the kernel choose one for the first and the rest
/// share it. The printed address names the host, the port, the family
/// when only one was bound, and for nonce-tcp the nonce file.
pub fn bind_tcp(tcp: &TcpAddress) -> io::Result<Listener> {
    let host = tcp.host.as_deref().unwrap_or("localhost");
    let bind = tcp.bind.as_deref().unwrap_or(host);
    let mut port = tcp.port.unwrap_or(0);
    let wanted = |ip: &IpAddr| match tcp.family {
        None => true,
        Some(Family::Ipv4) => ip.is_ipv4(),
        Some(Family::Ipv6) => ip.is_ipv6(),
    };
    let candidates: Vec<IpAddr> = if bind == "*" {
        vec![
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        ]
    } else {
        (bind, 0)
            .to_socket_addrs()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve '{bind}': {e}")))?
            .map(|a| a.ip())
            .collect()
    };
    let mut sockets = Vec::new();
    let mut families = Vec::new();
    let mut last_error = None;
    for ip in candidates.into_iter().filter(wanted) {
        match TcpListener::bind(IpSocketAddr::new(ip, port)) {
            Ok(socket) => {
                // Port 0: the first socket's port is every other's.
                port = socket.local_addr()?.port();
                families.push(if ip.is_ipv4() {
                    Family::Ipv4
                } else {
                    Family::Ipv6
                });
                sockets.push(ListenSocket::Tcp(socket));
            }
            Err(e) => last_error = Some(io::Error::new(e.kind(), format!("{ip}: {e}"))),
        }
    }
    if sockets.is_empty() {
        let why =
            last_error.map_or_else(|| "no address of that family".to_owned(), |e| e.to_string());
        return Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("cannot listen on tcp host '{bind}': {why}"),
        ));
    }
    let transport = if tcp.nonce { "nonce-tcp" } else { "tcp" };
    let mut pairs = vec![
        ("host".to_owned(), host.to_owned()),
        ("port".to_owned(), port.to_string()),
    ];
    if families.iter().all(|f| *f == families[0]) {
        pairs.push(("family".to_owned(), families[0].name().to_owned()));
    }
    let nonce = if tcp.nonce {
        let file = NonceFile::create()?;
        let path = file.path().to_string_lossy().into_owned();
        pairs.push(("noncefile".to_owned(), path));
        Some(file)
    } else {
        None
    };
    Ok(Listener {
        sockets,
        address: AddressEntry::new(transport, pairs).to_string(),
        cleanup: None,
        nonce,
    })
}

pub fn bind(address: &UnixAddress) -> io::Result<Listener> {
    match address {
        UnixAddress::Path(path) => bind_path(path),
        UnixAddress::Abstract(name) => bind_abstract(name),
        // tmpdir is dir: a socket file, never an abstract socket, as in
        // dbus-daemon since 1.14.4 (dbus#416). An abstract socket can be
        // reached from any process sharing the network namespace, a
        // sandbox with its own /tmp (Flatpak) included; a file is reached
        // only by those who can see it.
        UnixAddress::Tmpdir(dir) | UnixAddress::Dir(dir) => {
            bind_path(&dir.join(random_socket_name()))
        }
        UnixAddress::Runtime => {
            let dir = std::env::var_os("XDG_RUNTIME_DIR").ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "unix:runtime=yes needs XDG_RUNTIME_DIR to be set",
                )
            })?;
            bind_path(&Path::new(&dir).join("bus"))
        }
    }
}

fn bind_path(path: &Path) -> io::Result<Listener> {
    // A socket file left by a bus that died is stale: replace it, as
    // dbus-daemon does. Anything that is not a socket is left alone.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    let socket = UnixListener::bind(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot listen on {}: {e}", path.display()),
        )
    })?;
    // Who may connect is the bus's decision (authentication, then the
    // policy's user and group rules), not the file mode's: open the socket
    // to everyone as dbus-daemon does, whatever the umask. The directory's
    // own permissions still apply.
    use std::os::unix::fs::PermissionsExt;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)) {
        tracing::warn!("cannot set mode 0777 on socket {}: {e}", path.display());
    }
    let address = format!(
        "unix:path={}",
        escape_value(path.as_os_str().as_encoded_bytes())
    );
    Ok(Listener::unix(socket, address, Some(path.to_path_buf())))
}

fn bind_abstract(name: &[u8]) -> io::Result<Listener> {
    let addr = SocketAddr::from_abstract_name(name)?;
    let socket = UnixListener::bind_addr(&addr).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot listen on abstract socket {}: {e}",
                String::from_utf8_lossy(name)
            ),
        )
    })?;
    Ok(Listener::unix(
        socket,
        format!("unix:abstract={}", escape_value(name)),
        None,
    ))
}

/// `dbus-` and ten random alphanumerics, like dbus-daemon's names.
fn random_socket_name() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let name: String = crate::sys::random_bytes()[..10]
        .iter()
        .map(|&v| char::from(ALPHABET[v as usize % ALPHABET.len()]))
        .collect();
    format!("dbus-{name}")
}

/// Sockets passed by systemd socket activation (`LISTEN_FDS`, starting at
/// fd 3, for this pid). Empty when none were passed.
pub fn from_systemd() -> io::Result<Vec<Listener>> {
    let Some(fds) = crate::sys::take_systemd_listen_fds()? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for fd in fds {
        let socket = UnixListener::from(fd);
        let local = socket.local_addr()?;
        let address = if let Some(path) = local.as_pathname() {
            format!(
                "unix:path={}",
                escape_value(path.as_os_str().as_encoded_bytes())
            )
        } else if let Some(name) = local.as_abstract_name() {
            format!("unix:abstract={}", escape_value(name))
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a socket passed by systemd is not a named unix socket",
            ));
        };
        out.push(Listener::unix(socket, address, None));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_listener_is_connectable_and_removed_on_drop() {
        let dir = std::env::temp_dir().join(format!("qb-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bus socket");
        let l = bind(&UnixAddress::Path(path.clone())).unwrap();
        assert!(l.address.starts_with("unix:path="));
        assert!(
            l.address.contains("%20"),
            "space must be escaped: {}",
            l.address
        );
        std::os::unix::net::UnixStream::connect(&path).unwrap();
        drop(l);
        assert!(!path.exists());
        // A stale socket file is replaced.
        let l1 = bind(&UnixAddress::Path(path.clone())).unwrap();
        let keep = l1.cleanup.clone();
        std::mem::forget(l1);
        let l2 = bind(&UnixAddress::Path(keep.unwrap())).unwrap();
        drop(l2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tmpdir_creates_a_socket_file_never_an_abstract_socket() {
        let dir = std::env::temp_dir().join(format!("qb-tmpdir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let l = bind(&UnixAddress::Tmpdir(dir.clone())).unwrap();
        let prefix = format!("unix:path={}/dbus-", dir.display());
        assert!(l.address.starts_with(&prefix), "{}", l.address);
        let path = l.cleanup.clone().expect("a socket file to remove");
        assert!(path.starts_with(&dir), "{}", path.display());
        std::os::unix::net::UnixStream::connect(&path).unwrap();
        // Nothing of that name in the abstract namespace.
        let name = path.as_os_str().as_encoded_bytes();
        let abstract_addr = SocketAddr::from_abstract_name(name).unwrap();
        assert!(std::os::unix::net::UnixStream::connect_addr(&abstract_addr).is_err());
        drop(l);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dir_creates_a_socket_file_in_the_directory() {
        let dir = std::env::temp_dir().join(format!("qb-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let l = bind(&UnixAddress::Dir(dir.clone())).unwrap();
        assert!(l.cleanup.as_ref().unwrap().starts_with(&dir));
        drop(l);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_addresses_are_refused_with_the_address_named() {
        let err = bind_first("tcp:host=localhost,port=x").err().unwrap();
        assert!(
            err.to_string().contains("tcp:host=localhost,port=x"),
            "{err}"
        );
        let err = bind_first("launchd:env=X").err().unwrap();
        assert!(
            err.to_string().contains("Unknown address type 'launchd'"),
            "{err}"
        );
        // Without sockets from systemd (taken before anything is bound).
        let err = bind_first("systemd:").err().unwrap();
        assert_eq!(err.to_string(), "No socket received.");
    }

    #[test]
    fn the_full_address_names_every_listener_the_last_configured_first() {
        let dir = std::env::temp_dir().join(format!("qb-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let listeners: Vec<Listener> = ["a", "b"]
            .iter()
            .map(|name| bind_path(&dir.join(name)).unwrap())
            .collect();
        let (a, b) = (&listeners[0].address, &listeners[1].address);
        assert_eq!(
            full_address(&listeners, false, "0123"),
            format!("{b},guid=0123;{a},guid=0123")
        );
        assert_eq!(
            full_address(&listeners, true, "0123"),
            format!("{a},guid=0123;{b},guid=0123")
        );
        drop(listeners);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_first_entry_that_binds_is_the_one_listened_on() {
        let dir = std::env::temp_dir().join(format!("qb-first-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing/bus");
        let fallback = dir.join("bus");
        // A directory that does not exist and a transport Linux lacks give
        // way; the entry after them is bound, and only it.
        let l = bind_first(&format!(
            "unix:path={};launchd:env=X;unix:path={};unix:path={}",
            missing.display(),
            fallback.display(),
            dir.join("unused").display()
        ))
        .unwrap();
        assert!(l.address.ends_with("/bus"), "{}", l.address);
        assert!(fallback.exists() && !dir.join("unused").exists());
        drop(l);
        // Nothing binds: the first failure is the error.
        let err = bind_first(&format!(
            "unix:path={};unix:path={}",
            missing.display(),
            dir.join("also-missing/bus").display()
        ))
        .err()
        .unwrap();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        // A malformed entry stops the list, even with a good one after it.
        let err = bind_first(&format!(
            "tcp:host=localhost,port=x;unix:path={}",
            fallback.display()
        ))
        .err()
        .unwrap();
        assert!(err.to_string().contains("port=x"), "{err}");
        assert!(!fallback.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tcp(address: &str) -> TcpAddress {
        TcpAddress::try_from(&AddressEntry::parse(address).unwrap()).unwrap()
    }

    #[test]
    fn tcp_port_0_picks_a_port_the_address_names() {
        let l = bind_tcp(&tcp("tcp:host=127.0.0.1,port=0")).unwrap();
        let port = match &l.sockets[..] {
            [ListenSocket::Tcp(socket)] => socket.local_addr().unwrap().port(),
            _ => panic!("one tcp socket expected"),
        };
        assert_ne!(port, 0);
        assert_eq!(
            l.address,
            format!("tcp:host=127.0.0.1,port={port},family=ipv4")
        );
        std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        assert!(l.nonce.is_none());
    }

    #[test]
    fn tcp_bind_and_family_choose_the_sockets() {
        let l = bind_tcp(&tcp("tcp:host=example.invalid,bind=127.0.0.1,family=ipv4")).unwrap();
        assert!(
            l.address.starts_with("tcp:host=example.invalid,port="),
            "{}",
            l.address
        );
        assert!(bind_tcp(&tcp("tcp:host=127.0.0.1,family=ipv6")).is_err());
    }

    #[test]
    fn nonce_tcp_names_its_nonce_file() {
        let l = bind_tcp(&tcp("nonce-tcp:host=127.0.0.1")).unwrap();
        assert!(
            l.address.starts_with("nonce-tcp:host=127.0.0.1,port="),
            "{}",
            l.address
        );
        let entry = AddressEntry::parse(&l.address).unwrap();
        let file = PathBuf::from(entry.get("noncefile").unwrap());
        assert_eq!(std::fs::read(&file).unwrap(), l.nonce_bytes().unwrap());
        drop(l);
        assert!(!file.exists());
    }
}
