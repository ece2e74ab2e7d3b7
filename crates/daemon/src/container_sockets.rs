//! Where a container instance's socket goes and how it is made, as
//! dbus-daemon's bus/containers.c makes it: a path socket (never an
//! abstract one, which could not be bind-mounted into a container) with a
//! random name like `dbus-AbCdEfGhIj`, mode 0777 as every libdbus
//! listening socket (who may connect is decided by authentication:
//! EXTERNAL only, the creator's uid only), in
//!
//! - `/run/dbus/containers` for a bus running as root, which the system
//!   must have made (else AddServer fails, with FileNotFound when it is
//!   missing);
//! - `$XDG_RUNTIME_DIR/dbus-1/containers` otherwise, made (0700) as needed;
//! - the temporary directory (`TMPDIR`, `TMP`, `TEMP`, else `/tmp`)
//!   without `XDG_RUNTIME_DIR`.
//!
//! Owns: nothing. May touch: the file system (the directory, the socket
//! file), through `listen`'s binding.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use quickbus_bus::errors::{self, BusError};
use quickbus_wire::address::UnixAddress;

use crate::socket::ListenSocket;

/// The runtime directory of a bus run by root (dbus-daemon's
/// `DBUS_RUNSTATEDIR "/dbus/containers"` with `--runstatedir=/run`).
pub const ROOT_DIR: &str = "/run/dbus/containers";

/// A bound container socket.
pub struct Bound {
    pub socket: ListenSocket,
    /// The socket's file, removed when the instance stops listening.
    pub file: PathBuf,
    /// The connectable address, with the bus's guid.
    pub address: String,
}

/// The directory for a bus running as `euid`, made as the reference makes
/// it (`runtime_dir` is `$XDG_RUNTIME_DIR`, `tmp` the temporary directory).
pub fn directory(euid: u32, runtime_dir: Option<&Path>, tmp: &Path) -> io::Result<PathBuf> {
    if euid == 0 {
        return Ok(PathBuf::from(ROOT_DIR));
    }
    let Some(runtime_dir) = runtime_dir else {
        return Ok(tmp.to_path_buf());
    };
    let dbus_dir = runtime_dir.join("dbus-1");
    let containers = dbus_dir.join("containers");
    for dir in [&dbus_dir, &containers] {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("Failed to create directory {}: {e}", dir.display()),
                ))
            }
            _ => {}
        }
    }
    Ok(containers)
}

/// libdbus's `_dbus_get_tmpdir`.
fn tmpdir() -> PathBuf {
    ["TMPDIR", "TMP", "TEMP"]
        .iter()
        .find_map(std::env::var_os)
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

/// The error AddServer answers when the socket cannot be made, named by
/// what failed as libdbus names an errno.
fn bus_error(e: &io::Error) -> BusError {
    let name = match e.kind() {
        io::ErrorKind::NotFound => errors::FILE_NOT_FOUND,
        io::ErrorKind::PermissionDenied => errors::ACCESS_DENIED,
        io::ErrorKind::AddrInUse => errors::ADDRESS_IN_USE,
        _ => errors::FAILED,
    };
    BusError::new(name, e.to_string())
}

/// Bind a new container socket for this daemon (its euid and
/// environment), its address naming `guid`.
pub fn bind(guid: &str) -> Result<Bound, BusError> {
    let euid = rustix::process::geteuid().as_raw();
    let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    let dir = directory(euid, runtime_dir.as_deref(), &tmpdir()).map_err(|e| bus_error(&e))?;
    bind_in(&dir, guid).map_err(|e| bus_error(&e))
}

/// Bind a socket with a random name in `dir`.
pub fn bind_in(dir: &Path, guid: &str) -> io::Result<Bound> {
    let mut listener = crate::listen::bind(&UnixAddress::Dir(dir.to_path_buf()))?;
    // The loop owns the file from here: the listener must not remove it.
    let file = listener
        .cleanup
        .take()
        .ok_or_else(|| io::Error::other("a dir socket without a file"))?;
    let socket = listener
        .sockets
        .pop()
        .ok_or_else(|| io::Error::other("a dir socket without a socket"))?;
    Ok(Bound {
        socket,
        address: format!("{},guid={guid}", listener.address),
        file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qb-containers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn root_uses_the_run_directory_and_never_makes_it() {
        let tmp = scratch("root");
        assert_eq!(
            directory(0, Some(&tmp), &tmp).unwrap(),
            PathBuf::from(ROOT_DIR)
        );
        assert!(!tmp.join("dbus-1").exists());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn others_use_the_runtime_directory_made_0700_or_the_tmp_directory() {
        let runtime = scratch("runtime");
        let dir = directory(1000, Some(&runtime), Path::new("/nowhere")).unwrap();
        assert_eq!(dir, runtime.join("dbus-1/containers"));
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(directory(1000, None, &runtime).unwrap(), runtime);
        std::fs::remove_dir_all(&runtime).unwrap();
    }

    #[test]
    fn a_socket_file_with_a_connectable_address_and_the_guid() {
        let dir = scratch("bind");
        let bound = bind_in(&dir, "0123456789abcdef0123456789abcdef").unwrap();
        assert!(bound.file.starts_with(&dir));
        let name = bound.file.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("dbus-"), "{name}");
        let meta = std::fs::symlink_metadata(&bound.file).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o777);
        assert_eq!(
            bound.address,
            format!(
                "unix:path={},guid=0123456789abcdef0123456789abcdef",
                bound.file.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_is_file_not_found() {
        let dir = scratch("missing").join("absent");
        let error = bus_error(&bind_in(&dir, "00").err().unwrap());
        assert_eq!(error.name, errors::FILE_NOT_FOUND);
    }
}
