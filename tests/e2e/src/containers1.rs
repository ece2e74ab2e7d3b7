//! org.freedesktop.DBus.Containers1 for the tests of container servers:
//! what a portal reads of a caller, and whether the daemon under test has
//! the interface at all (Debian's dbus-daemon compiles it out; a build of
//! dbus with DBUS_ENABLE_CONTAINERS, the reference, has it).

use quickbus_client::{bus_call, Connection, Value};

use crate::locate::{daemon_path, testing_quickbus};
use crate::{skip, Bus};

/// The driver's interface for container servers, and the
/// GetConnectionCredentials key of a connection that came in through a
/// container's socket (as dbus-daemon's bus/driver.c adds it).
pub use quickbus_client::containers1::{INSTANCE_KEY, INTERFACE as CONTAINERS1};

/// The value of `key` in GetConnectionCredentials of `name`, unwrapped
/// from its variant.
pub fn connection_credential(conn: &mut Connection, name: &str, key: &str) -> Option<Value> {
    let reply = conn
        .call(bus_call("GetConnectionCredentials").body(vec![Value::String(name.into())]))
        .unwrap_or_else(|e| panic!("GetConnectionCredentials {name}: {e}"));
    let Some(Value::Array { items, .. }) = reply.body_values().unwrap().into_iter().next() else {
        panic!("GetConnectionCredentials {name} replied {reply:?}");
    };
    items.into_iter().find_map(|entry| match entry {
        Value::DictEntry(k, v) if *k == Value::String(key.into()) => match *v {
            Value::Variant(value) => Some(*value),
            other => Some(other),
        },
        _ => None,
    })
}

/// `true` (the caller returns) when the daemon under test is not quickbus
/// and has no Containers1, through [`skip::cannot_run`]'s rule. quickbus
/// always runs the test: a quickbus without Containers1 fails it.
#[track_caller]
pub fn skip_without_containers1(bus: &Bus) -> bool {
    if testing_quickbus() {
        return false;
    }
    let has_it = has_containers1(&mut bus.connect());
    skip::unless(
        has_it,
        &format!(
            "{} has no {CONTAINERS1} (dbus-daemon has it only when built with DBUS_ENABLE_CONTAINERS)",
            daemon_path().display()
        ),
    )
}

/// Asks the driver whether the caller is contained: a daemon with
/// Containers1 answers (with NotContainer, here), one without does not
/// know the method.
fn has_containers1(conn: &mut Connection) -> bool {
    let me = conn.unique_name().to_owned();
    let answer = conn.call(
        bus_call("GetConnectionInstance")
            .interface(CONTAINERS1)
            .body(vec![Value::String(me)]),
    );
    !matches!(
        answer.as_ref().map_err(|e| e.dbus_name()),
        Err(Some(
            "org.freedesktop.DBus.Error.UnknownMethod"
                | "org.freedesktop.DBus.Error.UnknownInterface"
        ))
    )
}

/// A bus run by root puts container sockets in /run/dbus/containers, which
/// the system makes (the tmpfiles.d snippet of quickbus's package, as dbus
/// 1.13's did): make it for a test that runs a bus as root and asks it for
/// a container server.
pub fn ensure_socket_dir() {
    if rustix::process::geteuid().is_root() {
        std::fs::create_dir_all("/run/dbus/containers").expect("/run/dbus/containers");
    }
}
