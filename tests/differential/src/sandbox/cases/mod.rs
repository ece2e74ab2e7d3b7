//! The sandbox cases, by family. Names: `family/what`. Labels: `app` (and
//! `app2`) connect through the filtered endpoint, `svc`, `svc2`, `peer`
//! straight to the bus.

mod broadcasts;
mod calls;
mod driver;
mod escape;
mod owning;

use quickbus_client::{MessageBuilder, Value};

use super::harness::{bus_call, s};
use super::{Case, Sandbox};

pub fn all() -> Vec<Case> {
    let mut all = Vec::new();
    all.extend(driver::cases());
    all.extend(calls::cases());
    all.extend(owning::cases());
    all.extend(broadcasts::cases());
    all.extend(escape::cases());
    all
}

pub const OBJ: &str = "/org/example/Obj";
pub const IFACE: &str = "org.example.Iface";

/// A call of `IFACE.member` at `OBJ` on `destination`.
pub fn call_to(destination: &str, member: &str) -> MessageBuilder {
    MessageBuilder::method_call(OBJ, member)
        .interface(IFACE)
        .destination(destination)
}

/// A call of `interface.member` at `path` on `destination`.
pub fn call_at(destination: &str, path: &str, interface: &str, member: &str) -> MessageBuilder {
    MessageBuilder::method_call(path, member)
        .interface(interface)
        .destination(destination)
}

/// A broadcast signal `interface.member` at `path`.
pub fn signal(path: &str, interface: &str, member: &str) -> MessageBuilder {
    MessageBuilder::signal(path, interface, member)
}

pub fn u(n: u32) -> Value {
    Value::Uint32(n)
}

/// `label` requests `name` with `flags`.
pub fn request(sb: &mut Sandbox, label: &str, name: &str, flags: u32) {
    sb.bus(label, "RequestName", vec![s(name), u(flags)]);
}

/// A service `label` that owns each of `names`.
pub fn service_owning(sb: &mut Sandbox, label: &str, names: &[&str]) {
    sb.service(label);
    for name in names {
        request(sb, label, name, 0);
    }
}

/// `label` adds the match rule `rule`.
pub fn add_match(sb: &mut Sandbox, label: &str, rule: &str) {
    sb.call(label, bus_call("AddMatch").body(vec![s(rule)]));
}

/// A call of org.freedesktop.DBus.`member`(`arg`) from `label`.
pub fn ask(sb: &mut Sandbox, label: &str, member: &str, arg: &str) {
    sb.bus(label, member, vec![s(arg)]);
}
