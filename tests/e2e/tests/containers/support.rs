//! What the Containers1 tests share: the calls, AddServer, and the socket
//! directory a bus run by root needs.

use quickbus_client::{containers1, Connection, MessageBuilder, Value, BUS_NAME, BUS_PATH};

pub use quickbus_e2e::containers1::{ensure_socket_dir, CONTAINERS1, INSTANCE_KEY};

/// A call to the bus's Containers1 interface.
pub fn containers_call(member: &str, body: Vec<Value>) -> MessageBuilder {
    MessageBuilder::method_call(BUS_PATH, member)
        .interface(CONTAINERS1)
        .destination(BUS_NAME)
        .body(body)
}

pub fn empty_asv() -> Value {
    Value::Array {
        elem_sig: "{sv}".into(),
        items: vec![],
    }
}

/// A container instance as AddServer returned it.
pub struct Server {
    pub instance: String,
    pub socket: String,
    pub address: String,
}

/// AddServer(kind, name, metadata, {}) from `manager`, which must succeed.
pub fn add_server(manager: &mut Connection, kind: &str, name: &str, metadata: Value) -> Server {
    add_server_with(manager, kind, name, metadata, empty_asv())
}

/// AddServer with the per-app filter `options` (`org.quickbus.Filter`,
/// xdg-dbus-proxy's policy options), which must succeed.
pub fn add_filtered_server(manager: &mut Connection, options: &[&str]) -> Server {
    let request = containers1::Request {
        container_type: "com.example.NotFlatpak".into(),
        name: "app".into(),
        metadata: Vec::new(),
        filter: Some(options.iter().map(|o| (*o).to_owned()).collect()),
    };
    let [kind, name, metadata, named] = <[Value; 4]>::try_from(request.arguments()).unwrap();
    let (Value::String(kind), Value::String(name)) = (kind, name) else {
        unreachable!("AddServer's first two arguments are strings")
    };
    add_server_with(manager, &kind, &name, metadata, named)
}

fn add_server_with(
    manager: &mut Connection,
    kind: &str,
    name: &str,
    metadata: Value,
    named: Value,
) -> Server {
    ensure_socket_dir();
    let reply = manager
        .call(containers_call(
            "AddServer",
            vec![
                Value::String(kind.into()),
                Value::String(name.into()),
                metadata,
                named,
            ],
        ))
        .expect("AddServer");
    let values = reply.body_values().unwrap();
    let instance = containers1::instance_of(values)
        .unwrap_or_else(|| panic!("AddServer returned {:?}", reply.signature()));
    Server {
        instance: instance.path,
        socket: instance.socket,
        address: instance.address,
    }
}

/// The names the filtered-container tests use: the app may talk to the
/// first, and must not see the second.
pub const TALK_NAME: &str = "org.example.Talk";
pub const HIDDEN_NAME: &str = "org.example.Hidden";

/// A manager, a service owning [`TALK_NAME`] and [`HIDDEN_NAME`], and a
/// container server filtered by `--talk=TALK_NAME`, all on the bus at
/// `address`. The manager and the service must stay connected.
pub fn filtered_setup(address: &str) -> (Connection, Connection, Server) {
    let connect = || {
        let mut conn = Connection::connect(address).expect("connect");
        conn.set_timeout(Some(quickbus_e2e::TIMEOUT)).unwrap();
        conn
    };
    let (mut manager, mut service) = (connect(), connect());
    assert_eq!(service.request_name(TALK_NAME, 0).unwrap(), 1);
    assert_eq!(service.request_name(HIDDEN_NAME, 0).unwrap(), 1);
    let server = add_filtered_server(&mut manager, &[&format!("--talk={TALK_NAME}")]);
    (manager, service, server)
}
