//! Turning `<listen>` / `--address=` addresses into bound sockets, and the
//! sockets systemd hands over (`LISTEN_FDS`).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};

use quickbus_wire::address::{escape_value, parse_addresses, UnixAddress};

/// A bound listening socket and the address clients use to reach it.
pub struct Listener {
    pub socket: UnixListener,
    /// The connectable address, escaped, without the guid.
    pub address: String,
    /// A socket file we created and remove on exit.
    pub cleanup: Option<PathBuf>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(path) = &self.cleanup {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Bind every address of a `;`-separated list (all must succeed).
pub fn bind_all(addresses: &str) -> io::Result<Vec<Listener>> {
    let parsed = parse_addresses(addresses).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("address '{addresses}': {e}"),
        )
    })?;
    let mut out = Vec::new();
    for entry in parsed {
        let unix = UnixAddress::try_from(&entry).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("address '{addresses}': {e}"),
            )
        })?;
        out.push(bind(&unix)?);
    }
    Ok(out)
}

pub fn bind(address: &UnixAddress) -> io::Result<Listener> {
    match address {
        UnixAddress::Path(path) => bind_path(path),
        UnixAddress::Abstract(name) => bind_abstract(name),
        // Linux has abstract sockets: tmpdir uses them, as dbus-daemon 1.14
        // does, so nothing is left in the directory.
        UnixAddress::Tmpdir(dir) => {
            let name = dir.join(random_socket_name());
            bind_abstract(name.as_os_str().as_encoded_bytes())
        }
        UnixAddress::Dir(dir) => bind_path(&dir.join(random_socket_name())),
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
    Ok(Listener {
        socket,
        address,
        cleanup: Some(path.to_path_buf()),
    })
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
    Ok(Listener {
        socket,
        address: format!("unix:abstract={}", escape_value(name)),
        cleanup: None,
    })
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
        out.push(Listener {
            socket,
            address,
            cleanup: None,
        });
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
    fn tmpdir_uses_an_abstract_socket() {
        let l = bind(&UnixAddress::Tmpdir("/tmp".into())).unwrap();
        assert!(
            l.address.starts_with("unix:abstract=/tmp/dbus-"),
            "{}",
            l.address
        );
        let name = l.address.trim_start_matches("unix:abstract=");
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        std::os::unix::net::UnixStream::connect_addr(&addr).unwrap();
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
        let err = bind_all("tcp:host=localhost").err().unwrap();
        assert!(err.to_string().contains("tcp:host=localhost"), "{err}");
    }
}
