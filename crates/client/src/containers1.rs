//! org.freedesktop.DBus.Containers1 for a container manager (the
//! `quickbus sandbox` launcher, the bench, the tests): AddServer, which
//! creates a container instance and its listening socket, and
//! StopInstance, which removes it again (closing its socket and every
//! connection made through it). docs/containers.md.

use crate::{bus_call, CallError, Connection, Value};

/// The bus driver's Containers1 interface (dbus-daemon's
/// DBUS_INTERFACE_CONTAINERS1, experimental).
pub const INTERFACE: &str = "org.freedesktop.DBus.Containers1";

/// The named argument of AddServer that turns on per-app filtering; its
/// value (type `as`) lists xdg-dbus-proxy policy options (docs/containers.md).
pub const FILTER_ARGUMENT: &str = "org.quickbus.Filter";

/// The GetConnectionCredentials key of a connection that came in through
/// a container's socket: its instance's path (dbus-daemon's bus/driver.c).
pub const INSTANCE_KEY: &str = "org.freedesktop.DBus.Containers1.Instance";

/// What AddServer is asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The container technology, with the syntax of an interface name.
    pub container_type: String,
    /// The app's name, as the container technology names it.
    pub name: String,
    /// Metadata for whoever asks GetInstanceInfo, as string values.
    pub metadata: Vec<(String, String)>,
    /// `None`: no filtering; `Some(options)`: filtered by these
    /// xdg-dbus-proxy policy options (an empty list allows only the driver).
    pub filter: Option<Vec<String>>,
}

/// What AddServer answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// The instance's object path, for StopInstance and GetInstanceInfo.
    pub path: String,
    /// The socket's file (what a sandbox would bind-mount).
    pub socket: String,
    /// The address the app connects to.
    pub address: String,
}

impl Request {
    /// AddServer's four arguments, signature `ssa{sv}a{sv}`.
    pub fn arguments(&self) -> Vec<Value> {
        let metadata = self
            .metadata
            .iter()
            .map(|(key, value)| string_variant_entry(key, Value::String(value.clone())))
            .collect();
        let named = self
            .filter
            .iter()
            .map(|options| {
                let list = Value::Array {
                    elem_sig: "s".into(),
                    items: options.iter().cloned().map(Value::String).collect(),
                };
                string_variant_entry(FILTER_ARGUMENT, list)
            })
            .collect();
        vec![
            Value::String(self.container_type.clone()),
            Value::String(self.name.clone()),
            dict(metadata),
            dict(named),
        ]
    }
}

fn string_variant_entry(key: &str, value: Value) -> Value {
    Value::DictEntry(
        Box::new(Value::String(key.to_owned())),
        Box::new(Value::Variant(Box::new(value))),
    )
}

fn dict(items: Vec<Value>) -> Value {
    Value::Array {
        elem_sig: "{sv}".into(),
        items,
    }
}

/// Calls AddServer; the instance lives until StopInstance, or until this
/// connection closes and the last app connection with it. The error is
/// the line to print.
pub fn add_server(bus: &mut Connection, request: &Request) -> Result<Instance, String> {
    let refused = |e: CallError| format!("AddServer failed: {e}");
    let reply = bus
        .call(
            bus_call("AddServer")
                .interface(INTERFACE)
                .body(request.arguments()),
        )
        .map_err(refused)?;
    let values = reply.body_values().map_err(|e| refused(e.into()))?;
    instance_of(values).ok_or_else(|| {
        format!(
            "AddServer answered with signature {:?}, not \"oays\"",
            reply.signature()
        )
    })
}

/// AddServer's reply `(o instance, ay socket path with its NUL, s
/// address)`; None for any other shape.
pub fn instance_of(values: Vec<Value>) -> Option<Instance> {
    match <[Value; 3]>::try_from(values).ok()? {
        [Value::ObjectPath(path), Value::Array { items, .. }, Value::String(address)] => {
            let mut bytes = items
                .into_iter()
                .map(|b| match b {
                    Value::Byte(b) => Some(b),
                    _ => None,
                })
                .collect::<Option<Vec<u8>>>()?;
            if bytes.pop() != Some(0) {
                return None;
            }
            let socket = String::from_utf8(bytes).ok()?;
            Some(Instance {
                path,
                socket,
                address,
            })
        }
        _ => None,
    }
}

/// Calls StopInstance: the socket closes and goes away, and every
/// connection that came in through it is disconnected.
pub fn stop_instance(bus: &mut Connection, instance: &Instance) -> Result<(), CallError> {
    bus.call(
        bus_call("StopInstance")
            .interface(INTERFACE)
            .body(vec![Value::ObjectPath(instance.path.clone())]),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(filter: Option<Vec<String>>) -> Request {
        Request {
            container_type: "org.quickbus.Sandbox".into(),
            name: "app".into(),
            metadata: vec![("Version".into(), "1".into())],
            filter,
        }
    }

    #[test]
    fn add_server_arguments_have_the_reference_signature() {
        let signature: String = request(None)
            .arguments()
            .iter()
            .map(Value::signature)
            .collect();
        assert_eq!(signature, "ssa{sv}a{sv}");
    }

    #[test]
    fn without_filtering_there_is_no_named_argument() {
        let arguments = request(None).arguments();
        assert_eq!(arguments[3], dict(vec![]));
        assert_eq!(
            arguments[2],
            dict(vec![string_variant_entry(
                "Version",
                Value::String("1".into())
            )])
        );
    }

    #[test]
    fn filtering_is_one_named_argument_listing_the_options() {
        let arguments = request(Some(vec!["--talk=org.example.Foo".into()])).arguments();
        let expected = string_variant_entry(
            "org.quickbus.Filter",
            Value::Array {
                elem_sig: "s".into(),
                items: vec![Value::String("--talk=org.example.Foo".into())],
            },
        );
        assert_eq!(arguments[3], dict(vec![expected]));
        assert_eq!(arguments[3].signature(), "a{sv}");
    }

    #[test]
    fn filtering_with_no_rules_is_an_empty_list() {
        let arguments = request(Some(vec![])).arguments();
        let Value::Array { items, .. } = &arguments[3] else {
            panic!("{arguments:?}")
        };
        assert_eq!(
            items[0],
            string_variant_entry(
                "org.quickbus.Filter",
                Value::Array {
                    elem_sig: "s".into(),
                    items: vec![]
                }
            )
        );
    }

    #[test]
    fn the_reply_gives_the_path_and_the_address() {
        let reply = vec![
            Value::ObjectPath("/org/freedesktop/DBus/Containers1/c1".into()),
            Value::Array {
                elem_sig: "y".into(),
                items: vec![Value::Byte(b'/'), Value::Byte(0)],
            },
            Value::String("unix:path=/run/dbus/containers/dbus-x".into()),
        ];
        assert_eq!(
            instance_of(reply),
            Some(Instance {
                path: "/org/freedesktop/DBus/Containers1/c1".into(),
                socket: "/".into(),
                address: "unix:path=/run/dbus/containers/dbus-x".into(),
            })
        );
        assert_eq!(instance_of(vec![Value::String("x".into())]), None);
        let without_nul = vec![
            Value::ObjectPath("/c".into()),
            Value::Array {
                elem_sig: "y".into(),
                items: vec![Value::Byte(b'/')],
            },
            Value::String("unix:path=/".into()),
        ];
        assert_eq!(instance_of(without_nul), None);
    }
}
