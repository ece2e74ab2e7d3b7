//! What the Containers1 tests share: the calls, AddServer, and the socket
//! directory a bus run by root needs.

use quickbus_client::{Connection, Message, MessageBuilder, Value, BUS_NAME, BUS_PATH};

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
    let options = Value::Array {
        elem_sig: "s".into(),
        items: options.iter().map(|o| Value::String((*o).into())).collect(),
    };
    let named = Value::Array {
        elem_sig: "{sv}".into(),
        items: vec![Value::DictEntry(
            Box::new(Value::String("org.quickbus.Filter".into())),
            Box::new(Value::Variant(Box::new(options))),
        )],
    };
    add_server_with(manager, "com.example.NotFlatpak", "app", empty_asv(), named)
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
    assert_eq!(reply.signature(), "oays");
    let values = reply.body_values().unwrap();
    let [Value::ObjectPath(instance), Value::Array { items, .. }, Value::String(address)] =
        &values[..]
    else {
        panic!("AddServer returned {values:?}");
    };
    let mut bytes: Vec<u8> = items
        .iter()
        .map(|b| match b {
            Value::Byte(b) => *b,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(bytes.pop(), Some(0), "the socket path ends in a NUL");
    Server {
        instance: instance.clone(),
        socket: String::from_utf8(bytes).unwrap(),
        address: address.clone(),
    }
}

/// The value of `key` in an `a{sv}` reply's first argument.
pub fn entry(reply: &Message, key: &str) -> Option<Value> {
    let Some(Value::Array { items, .. }) = reply.body_values().unwrap().into_iter().next() else {
        panic!("no a{{sv}}: {reply:?}")
    };
    items.into_iter().find_map(|item| match item {
        Value::DictEntry(k, v) if *k == Value::String(key.into()) => match *v {
            Value::Variant(inner) => Some(*inner),
            other => Some(other),
        },
        _ => None,
    })
}
