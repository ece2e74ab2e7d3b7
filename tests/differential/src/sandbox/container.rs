//! The Containers1 calls side B makes on quickbus-daemon: AddServer with
//! the rules as the `org.quickbus.Filter` named argument (the contract of
//! issue 26: type `as`, each element one xdg-dbus-proxy option as on its
//! command line), and StopInstance at the end.

use std::path::PathBuf;

use quickbus_client::{containers1, Message, MessageBuilder, MessageType, Value};

use crate::normalize::DRIVER;

pub use quickbus_client::containers1::INTERFACE as CONTAINERS_INTERFACE;
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
    let request = containers1::Request {
        container_type: "org.quickbus.Differential".into(),
        name: "sandbox".into(),
        metadata: Vec::new(),
        filter: Some(rules.to_vec()),
    };
    driver_call("AddServer").body(request.arguments())
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
    let instance = containers1::instance_of(values)
        .ok_or_else(|| format!("AddServer returned {:?}", reply.signature()))?;
    Ok(Instance {
        path: instance.path,
        socket: PathBuf::from(instance.socket),
    })
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
