//! The Containers1 calls side B makes on quickbus-daemon: AddServer with
//! the rules as the `org.quickbus.Filter` named argument (the contract of
//! issue 26: type `as`, each element one xdg-dbus-proxy option as on its
//! command line), and StopInstance at the end.

use std::path::PathBuf;

use quickbus_client::{Message, MessageBuilder, MessageType, Value};

use crate::normalize::DRIVER;

pub const CONTAINERS_INTERFACE: &str = "org.freedesktop.DBus.Containers1";
/// The named argument that turns filtering on.
pub const FILTER_ARGUMENT: &str = "org.quickbus.Filter";
const DRIVER_PATH: &str = "/org/freedesktop/DBus";

/// A container instance the bus made: its object path and socket. The bus
/// removes the socket when the instance stops; dropping this removes a
/// leftover (a case that panicked before StopInstance, a bus killed).
pub struct Instance {
    pub path: String,
    pub socket: PathBuf,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `AddServer("org.quickbus.Differential", "sandbox", {}, {"org.quickbus.Filter": <rules>})`.
pub fn add_server(rules: &[String]) -> MessageBuilder {
    let filter = Value::Array {
        elem_sig: "s".into(),
        items: rules.iter().map(|r| Value::String(r.clone())).collect(),
    };
    let named = Value::Array {
        elem_sig: "{sv}".into(),
        items: vec![Value::DictEntry(
            Box::new(Value::String(FILTER_ARGUMENT.into())),
            Box::new(Value::Variant(Box::new(filter))),
        )],
    };
    let metadata = Value::Array {
        elem_sig: "{sv}".into(),
        items: Vec::new(),
    };
    driver_call("AddServer").body(vec![
        Value::String("org.quickbus.Differential".into()),
        Value::String("sandbox".into()),
        metadata,
        named,
    ])
}

/// The instance in AddServer's reply `(o, ay, s)`, or why there is none.
pub fn instance(reply: Option<&Message>) -> Result<Instance, String> {
    let reply = reply.ok_or("no reply to AddServer")?;
    if reply.msg_type() != MessageType::MethodReturn {
        return Err(format!(
            "AddServer failed: {} {:?}",
            reply.error_name().unwrap_or("?"),
            reply.body_values().ok()
        ));
    }
    let values = reply.body_values().map_err(|e| e.to_string())?;
    match values.as_slice() {
        [Value::ObjectPath(path), Value::Array { items, .. }, Value::String(_)] => {
            let mut bytes: Vec<u8> = items
                .iter()
                .filter_map(|v| match v {
                    Value::Byte(b) => Some(*b),
                    _ => None,
                })
                .collect();
            // The socket path is a bytestring with its nul terminator.
            if bytes.last() == Some(&0) {
                bytes.pop();
            }
            Ok(Instance {
                path: path.clone(),
                socket: PathBuf::from(String::from_utf8_lossy(&bytes).into_owned()),
            })
        }
        other => Err(format!("AddServer returned {other:?}")),
    }
}

/// `StopInstance(path)`.
pub fn stop_instance(path: &str) -> MessageBuilder {
    driver_call("StopInstance").body(vec![Value::ObjectPath(path.into())])
}

fn driver_call(member: &str) -> MessageBuilder {
    MessageBuilder::method_call(DRIVER_PATH, member)
        .interface(CONTAINERS_INTERFACE)
        .destination(DRIVER)
}
