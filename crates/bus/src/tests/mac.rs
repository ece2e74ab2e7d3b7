//! The security module's hook: what the bus asks a [`Mediator`] and the
//! texts and outcomes of its refusals, with a fake module standing in for
//! SELinux.

use quickbus_wire::{MessageBuilder, MessageType, Value};

use std::collections::HashMap;

use super::{call_bus, creds, options, s, Harness};
use crate::mac::{MacRefusal, Mediator, SendCheck, Subject, Target};
use crate::*;

/// A made-up policy over labels: `client_t` may not send to `secret_t`
/// nor own org.example.Secret; `nobus_t` may not send to the bus;
/// `mute_t` may send only to the bus.
struct FakePolicy;

fn label(s: Option<Subject<'_>>) -> &str {
    s.and_then(|s| s.label)
        .map(|l| std::str::from_utf8(l).unwrap())
        .unwrap_or("bus_t")
}

impl Mediator for FakePolicy {
    fn may_own(&self, owner: Subject<'_>, name: &str) -> Result<(), MacRefusal> {
        match (label(Some(owner)), name) {
            ("client_t", "org.example.Secret") => Err(MacRefusal::SELinux),
            _ => Ok(()),
        }
    }

    fn may_send(&self, check: &SendCheck<'_>) -> Result<(), MacRefusal> {
        let recipient = match check.target {
            Target::Activation { .. } => return Ok(()),
            Target::Bus => None,
            Target::Peer(peer) => Some(peer),
        };
        match (label(Some(check.sender)), label(recipient)) {
            ("client_t", "secret_t") | ("nobus_t", "bus_t") => Err(MacRefusal::SELinux),
            ("mute_t", to) if to != "bus_t" => Err(MacRefusal::SELinux),
            _ => Ok(()),
        }
    }
}

fn harness() -> Harness {
    let mut h = Harness::new();
    h.bus.set_mediator(Some(Box::new(FakePolicy)));
    h
}

/// A peer labelled `label`, past Hello.
fn labelled(h: &mut Harness, label: &str, pid: u32) -> (ConnId, String) {
    let id = h.bus.add_connection(
        Credentials {
            security_label: Some(label.as_bytes().to_vec()),
            ..creds(1000, pid)
        },
        false,
    );
    let name = match &h.driver(id, "Hello", vec![])[0] {
        Value::String(n) => n.clone(),
        other => panic!("Hello returned {other:?}"),
    };
    h.take();
    (id, name)
}

fn ping(to: &str) -> MessageBuilder {
    MessageBuilder::method_call("/", "Ping")
        .interface("org.example.Test")
        .destination(to)
}

#[test]
fn a_call_the_module_refuses_is_answered_with_dbus_daemons_selinux_text() {
    let mut h = harness();
    let (client, client_name) = labelled(&mut h, "client_t", 10);
    let (_secret, secret_name) = labelled(&mut h, "secret_t", 20);
    let reply = h.call(client, ping(&secret_name));
    assert_eq!(reply.msg_type(), MessageType::Error);
    assert_eq!(reply.error_name(), Some(errors::ACCESS_DENIED));
    let text = match &reply.body_values().unwrap()[0] {
        Value::String(t) => t.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        text,
        format!(
            "An SELinux policy prevents this sender from sending this message to this recipient, 0 matched rules; type=\"method_call\", sender=\"{client_name}\" (uid=1000 pid=10 comm=\"\" label=\"client_t\") interface=\"org.example.Test\" member=\"Ping\" error name=\"(unset)\" requested_reply=\"0\" destination=\"{secret_name}\" (uid=1000 pid=20 comm=\"\" label=\"secret_t\")"
        )
    );
    assert!(h.take().is_empty(), "nothing reached the service");
}

#[test]
fn a_call_the_module_allows_is_delivered() {
    let mut h = harness();
    let (client, _) = labelled(&mut h, "client_t", 10);
    let (service, service_name) = labelled(&mut h, "service_t", 20);
    h.send(client, ping(&service_name));
    let got = h.take();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, service);
}

#[test]
fn a_reply_the_module_refuses_never_reaches_the_caller() {
    let mut h = harness();
    let (client, client_name) = labelled(&mut h, "client_t", 10);
    let (service, _) = labelled(&mut h, "mute_t", 20);
    let service_name = h.bus.unique_name(service).unwrap().to_owned();
    let serial = h.send(client, ping(&service_name));
    let (to, call) = h.take().remove(0);
    assert_eq!((to, call.serial()), (service, call.serial()));
    h.send(
        service,
        MessageBuilder::method_return(call.serial()).destination(client_name),
    );
    let got = h.take();
    assert!(
        !got.iter()
            .any(|(to, m)| *to == client && m.reply_serial() == Some(serial)),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|(to, m)| *to == service && m.error_name() == Some(errors::ACCESS_DENIED)),
        "the replier is told: {got:?}"
    );
}

#[test]
fn a_domain_without_send_to_the_bus_cannot_say_hello() {
    let mut h = harness();
    let id = h.bus.add_connection(
        Credentials {
            security_label: Some(b"nobus_t".to_vec()),
            ..creds(1000, 30)
        },
        false,
    );
    let reply = h.call(id, call_bus("Hello", vec![]));
    assert_eq!(reply.error_name(), Some(errors::ACCESS_DENIED));
    let text = match &reply.body_values().unwrap()[0] {
        Value::String(t) => t.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        text.starts_with("An SELinux policy prevents this sender from sending this message to this recipient, 0 matched rules; type=\"method_call\", sender=\"(null)\""),
        "{text}"
    );
    assert!(
        text.ends_with("destination=\"org.freedesktop.DBus\" (bus)"),
        "{text}"
    );
    assert_eq!(h.bus.unique_name(id), None);
}

#[test]
fn owning_a_name_the_module_refuses_gives_dbus_daemons_text() {
    let mut h = harness();
    let (client, client_name) = labelled(&mut h, "client_t", 10);
    let (name, text) = h.driver_error(
        client,
        call_bus(
            "RequestName",
            vec![s("org.example.Secret"), Value::Uint32(0)],
        ),
    );
    assert_eq!(name, errors::ACCESS_DENIED);
    assert_eq!(
        text,
        format!("Connection \"{client_name}\" is not allowed to own the service \"org.example.Secret\" due to SELinux policy")
    );
    assert_eq!(h.request_name(client, "org.example.Open", 0), 1);
}

#[test]
fn the_bus_itself_is_not_mediated_when_it_speaks() {
    // NameAcquired from the bus reaches even a domain that may receive
    // from nobody else.
    let mut h = harness();
    let (mute, _) = labelled(&mut h, "mute_t", 10);
    h.send(
        mute,
        call_bus("RequestName", vec![s("org.example.Mute"), Value::Uint32(0)]),
    );
    let got = h.take();
    assert!(
        got.iter()
            .any(|(to, m)| *to == mute && m.member() == Some("NameAcquired")),
        "{got:?}"
    );
}

/// Every action, deliveries parsed; activations named.
fn drain(h: &mut Harness) -> (Vec<String>, Vec<(ConnId, quickbus_wire::Message)>) {
    let mut started = Vec::new();
    let mut delivered = Vec::new();
    for action in std::mem::take(&mut h.out) {
        match action {
            Action::Queued { to, msg, .. } => delivered.push((to, super::parse_out(&msg))),
            Action::Activate { name, .. } => started.push(name),
            other => panic!("unexpected {other:?}"),
        }
    }
    (started, delivered)
}

#[test]
fn an_eavesdropper_the_sender_may_not_send_to_gets_no_copy() {
    let mut h = harness();
    let (client, _) = labelled(&mut h, "client_t", 10);
    let (service, service_name) = labelled(&mut h, "service_t", 20);
    // Root eavesdroppers (the harness bus runs as uid 1000: root may).
    let mut eavesdropper = |label: &str| {
        let id = h.bus.add_connection(
            Credentials {
                security_label: Some(label.as_bytes().to_vec()),
                ..creds(0, 30)
            },
            false,
        );
        h.driver(id, "Hello", vec![]);
        h.add_match(id, "eavesdrop=true,member='Ping'");
        h.take();
        id
    };
    let secret = eavesdropper("secret_t");
    let open = eavesdropper("service_t");
    h.send(client, ping(&service_name));
    let got: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
    assert!(got.contains(&service), "{got:?}");
    assert!(got.contains(&open), "{got:?}");
    assert!(!got.contains(&secret), "{got:?}");
}

/// A broadcast goes only to the receivers the module lets the sender
/// send to, each asked on its own.
#[test]
fn a_broadcast_reaches_only_the_receivers_the_module_allows() {
    let mut h = harness();
    let (client, _) = labelled(&mut h, "client_t", 10);
    let (secret, _) = labelled(&mut h, "secret_t", 20);
    let (open, _) = labelled(&mut h, "service_t", 30);
    for receiver in [secret, open] {
        h.add_match(receiver, "type='signal',member='Tick'");
    }
    h.take();
    h.send(
        client,
        MessageBuilder::signal("/", "org.example.Test", "Tick"),
    );
    let got: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(got, vec![open]);
}

#[test]
fn activation_is_not_mediated_but_the_started_service_is() {
    let mut h = harness();
    let (client, _) = labelled(&mut h, "client_t", 10);
    h.send(client, ping("org.example.Activatable"));
    let (started, delivered) = drain(&mut h);
    assert_eq!(started, ["org.example.Activatable"]);
    assert!(delivered.is_empty(), "{delivered:?}");
    // The service comes up in a domain the client may not send to.
    let (service, _) = labelled(&mut h, "secret_t", 20);
    h.send(
        service,
        call_bus(
            "RequestName",
            vec![s("org.example.Activatable"), Value::Uint32(0)],
        ),
    );
    let (_, delivered) = drain(&mut h);
    assert!(
        !delivered
            .iter()
            .any(|(to, m)| *to == service && m.member() == Some("Ping")),
        "{delivered:?}"
    );
    assert!(
        delivered.iter().any(|(to, m)| *to == client
            && m.error_name() == Some(errors::ACCESS_DENIED)
            && format!("{:?}", m.body_values()).contains("An SELinux policy")),
        "{delivered:?}"
    );
}

/// A fake AppArmor: records every question and refuses `client_t`'s
/// eavesdropping, its owning org.example.Secret, and any activation of
/// org.example.Activatable.
struct FakeAppArmor(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Mediator for FakeAppArmor {
    fn may_own(&self, owner: Subject<'_>, name: &str) -> Result<(), MacRefusal> {
        let who = label(Some(owner));
        self.0.lock().unwrap().push(format!("bind {who} {name}"));
        match (who, name) {
            ("client_t", "org.example.Secret") => Err(MacRefusal::AppArmor),
            ("broken_t", _) => Err(MacRefusal::Failed {
                name: errors::ACCESS_DENIED,
                text: "Failed to query AppArmor policy: Permission denied".into(),
            }),
            _ => Ok(()),
        }
    }

    fn may_send(&self, check: &SendCheck<'_>) -> Result<(), MacRefusal> {
        let target = match check.target {
            Target::Bus => "bus".to_owned(),
            Target::Peer(p) => label(Some(p)).to_owned(),
            Target::Activation {
                name,
                assumed_label,
            } => format!("activation:{name}:{}", assumed_label.unwrap_or("")),
        };
        self.0.lock().unwrap().push(format!(
            "send {} ({}) -> {} {} reply={}",
            label(Some(check.sender)),
            check.source,
            target,
            check.destination(),
            check.requested_reply
        ));
        if target.starts_with("activation:org.example.Activatable:") {
            return Err(MacRefusal::AppArmor);
        }
        Ok(())
    }

    fn may_eavesdrop(&self, who: Subject<'_>) -> Result<(), MacRefusal> {
        let who = label(Some(who));
        self.0.lock().unwrap().push(format!("eavesdrop {who}"));
        if who == "client_t" {
            return Err(MacRefusal::AppArmor);
        }
        Ok(())
    }

    fn features(&self) -> Vec<&'static str> {
        vec!["AppArmor"]
    }
}

fn apparmor_harness() -> (Harness, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let log = std::sync::Arc::default();
    let mut h = Harness::new();
    h.bus
        .set_mediator(Some(Box::new(FakeAppArmor(std::sync::Arc::clone(&log)))));
    (h, log)
}

#[test]
fn apparmor_is_asked_with_the_sender_the_source_name_and_the_receiver() {
    let (mut h, log) = apparmor_harness();
    let (client, client_name) = labelled(&mut h, "client_t", 10);
    let (service, service_name) = labelled(&mut h, "service_t", 20);
    log.lock().unwrap().clear();
    let serial = h.send(client, ping(&service_name));
    let (to, call) = h.take().remove(0);
    assert_eq!(to, service);
    h.send(
        service,
        MessageBuilder::method_return(call.serial()).destination(client_name.as_str()),
    );
    let got = h.take();
    assert!(got
        .iter()
        .any(|(to, m)| *to == client && m.reply_serial() == Some(serial)));
    assert_eq!(
        *log.lock().unwrap(),
        [
            format!("send client_t ({client_name}) -> service_t {service_name} reply=false"),
            format!("send service_t ({service_name}) -> client_t {client_name} reply=true"),
        ]
    );
}

#[test]
fn hello_before_a_name_is_asked_as_from_the_bus_name_to_the_bus() {
    let (mut h, log) = apparmor_harness();
    labelled(&mut h, "client_t", 10);
    assert_eq!(
        log.lock().unwrap()[0],
        "send client_t (org.freedesktop.DBus) -> bus org.freedesktop.DBus reply=false"
    );
}

#[test]
fn an_apparmor_refusal_of_activation_gives_dbus_daemons_text_and_starts_nothing() {
    let (mut h, log) = apparmor_harness();
    let (client, client_name) = labelled(&mut h, "client_t", 10);
    h.send(client, ping("org.example.Activatable"));
    let (started, delivered) = drain(&mut h);
    assert!(started.is_empty(), "{started:?}");
    let refused = delivered
        .iter()
        .find(|(to, m)| *to == client && m.error_name() == Some(errors::ACCESS_DENIED))
        .expect("refused");
    assert_eq!(
        refused.1.body_values().unwrap()[0],
        Value::String(format!("An AppArmor policy prevents this sender from sending this message to this recipient; type=\"method_call\", sender=\"{client_name}\" (uid=1000 pid=10 comm=\"\" label=\"client_t\") interface=\"org.example.Test\" member=\"Ping\" error name=\"(unset)\" requested_reply=\"0\" destination=\"org.example.Activatable\" (bus)"))
    );
    assert!(log.lock().unwrap().iter().any(|l| l
        .ends_with("-> activation:org.example.Activatable: org.example.Activatable reply=false")));
}

#[test]
fn activation_is_asked_with_the_assumed_label_also_of_a_service_found_on_a_rescan() {
    let log = std::sync::Arc::default();
    let mut opts = options();
    opts.rescan_service_files = true;
    opts.assumed_apparmor_labels =
        HashMap::from([("org.example.Activatable".into(), "/usr/bin/known".into())]);
    let mut h = Harness::with_options(opts);
    h.bus
        .set_mediator(Some(Box::new(FakeAppArmor(std::sync::Arc::clone(&log)))));
    h.new_service_files.insert(
        "org.example.Late".into(),
        crate::activation::FoundService {
            assumed_apparmor_label: Some("/usr/bin/late".into()),
            ..Default::default()
        },
    );
    let (client, name) = labelled(&mut h, "other_t", 10);
    h.send(client, ping("org.example.Activatable"));
    h.send(client, ping("org.example.Late"));
    drain(&mut h);
    let asked: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("activation:"))
        .cloned()
        .collect();
    assert_eq!(
        asked,
        [
            format!("send other_t ({name}) -> activation:org.example.Activatable:/usr/bin/known org.example.Activatable reply=false"),
            format!("send other_t ({name}) -> activation:org.example.Late:/usr/bin/late org.example.Late reply=false"),
        ]
    );
}

#[test]
fn an_apparmor_refusal_to_own_names_apparmor() {
    let (mut h, log) = apparmor_harness();
    let (client, client_name) = labelled(&mut h, "client_t", 10);
    let (name, text) = h.driver_error(
        client,
        call_bus(
            "RequestName",
            vec![s("org.example.Secret"), Value::Uint32(0)],
        ),
    );
    assert_eq!(name, errors::ACCESS_DENIED);
    assert_eq!(
        text,
        format!("Connection \"{client_name}\" is not allowed to own the service \"org.example.Secret\" due to AppArmor policy")
    );
    assert!(log
        .lock()
        .unwrap()
        .contains(&"bind client_t org.example.Secret".to_owned()));
    let (broken, _) = labelled(&mut h, "broken_t", 11);
    let (_, text) = h.driver_error(
        broken,
        call_bus("RequestName", vec![s("org.example.Any"), Value::Uint32(0)]),
    );
    assert_eq!(text, "Failed to query AppArmor policy: Permission denied");
}

#[test]
fn eavesdropping_asks_apparmor_after_the_privilege_check() {
    let (mut h, log) = apparmor_harness();
    // uid 0 passes the privilege check; AppArmor then refuses client_t.
    let root = |h: &mut Harness, label: &str| {
        let id = h.bus.add_connection(
            Credentials {
                security_label: Some(label.as_bytes().to_vec()),
                ..creds(0, 30)
            },
            false,
        );
        h.driver(id, "Hello", vec![]);
        h.take();
        id
    };
    let client = root(&mut h, "client_t");
    let me = h.bus.unique_name(client).unwrap().to_owned();
    let (name, text) = h.driver_error(
        client,
        call_bus("AddMatch", vec![s("eavesdrop=true,member='Ping'")]),
    );
    assert_eq!(name, errors::ACCESS_DENIED);
    assert_eq!(
        text,
        format!("Connection \"{me}\" is not allowed to eavesdrop due to AppArmor policy")
    );
    let (name, text) = h.driver_error(
        client,
        call_bus("BecomeMonitor", vec![])
            .interface("org.freedesktop.DBus.Monitoring")
            .body(vec![
                Value::Array {
                    elem_sig: "s".into(),
                    items: vec![],
                },
                Value::Uint32(0),
            ]),
    );
    assert_eq!(
        (name.as_str(), text.as_str()),
        (
            errors::ACCESS_DENIED,
            format!("Connection \"{me}\" is not allowed to eavesdrop due to AppArmor policy")
                .as_str()
        )
    );
    // An ordinary match rule asks nothing about eavesdropping.
    log.lock().unwrap().clear();
    h.add_match(client, "member='Ping'");
    assert!(!log
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.starts_with("eavesdrop")));
    let ok = root(&mut h, "service_t");
    h.add_match(ok, "eavesdrop=true,member='Ping'");
    assert_eq!(log.lock().unwrap().last().unwrap(), "eavesdrop service_t");
}

#[test]
fn features_name_the_enabled_module_in_dbus_daemons_order() {
    let (mut h, _) = apparmor_harness();
    let (client, _) = labelled(&mut h, "client_t", 10);
    let reply = super::get_property(&mut h, client, crate::BUS_INTERFACE, "Features");
    assert_eq!(
        reply.body_values().unwrap(),
        vec![Value::Variant(Box::new(Value::Array {
            elem_sig: "s".into(),
            items: vec![
                s("ActivatableServicesChanged"),
                s("AppArmor"),
                s("HeaderFiltering")
            ]
        }))]
    );
}
