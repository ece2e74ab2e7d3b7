//! BecomeMonitor: with rules, with bad arguments, and monitors that try to
//! talk.

use quickbus_client::{MessageBuilder, Value};

use super::{call_to, s, signal, strings, u, Scenario};

/// Traffic for the monitors to see: a signal, a call from a to b and its
/// reply, an error.
fn traffic(script: &mut crate::script::Script) {
    let b = script.unique_name("b");
    script.send("a", signal("Seen").body(vec![s("one")]));
    script.send("a", call_to(&b, "Call"));
    script.reply("b", vec![]);
    script.send("a", call_to(&b, "Fail"));
    script.reply_error("b", "com.example.Error.Failed");
    script.bus("a", "GetId", vec![]);
    script.drain("a");
}

fn monitor_call(rules: Value, flags: u32) -> MessageBuilder {
    MessageBuilder::method_call("/org/freedesktop/DBus", "BecomeMonitor")
        .interface("org.freedesktop.DBus.Monitoring")
        .destination("org.freedesktop.DBus")
        .body(vec![rules, u(flags)])
}

pub fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    for (case, rules) in [
        ("member", &["member='Seen'"][..]),
        ("method-calls", &["type='method_call'"][..]),
        ("errors", &["type='error'"][..]),
        ("sender-driver", &["sender='org.freedesktop.DBus'"][..]),
        ("two-rules", &["member='Seen'", "member='Fail'"][..]),
        (
            "eavesdrop-rule",
            &["eavesdrop='true',type='method_return'"][..],
        ),
    ] {
        all.push(Scenario::new(format!("monitor/{case}"), move |script| {
            script.client("m");
            script.become_monitor("m", rules);
            script.client("a");
            script.client("b");
            traffic(script);
        }));
    }
    all.push(Scenario::new("monitor/invalid-rule", |script| {
        script.client("m");
        script.call("m", monitor_call(strings(&["bogus"]), 0));
        script.bus("m", "GetId", vec![]);
    }));
    all.push(Scenario::new("monitor/nonzero-flags", |script| {
        script.client("m");
        script.call("m", monitor_call(strings(&[]), 1));
        script.bus("m", "GetId", vec![]);
    }));
    all.push(Scenario::new("monitor/wrong-signature", |script| {
        script.client("m");
        let call = MessageBuilder::method_call("/org/freedesktop/DBus", "BecomeMonitor")
            .interface("org.freedesktop.DBus.Monitoring")
            .destination("org.freedesktop.DBus")
            .body(vec![strings(&[])]);
        script.call("m", call);
    }));
    all.push(Scenario::new("monitor/holding-a-name", |script| {
        script.client("m");
        script.bus("m", "RequestName", vec![s("com.example.Watcher"), u(0)]);
        script.become_monitor("m", &["member='Seen'"]);
        script.client("a");
        script.bus("a", "NameHasOwner", vec![s("com.example.Watcher")]);
    }));
    all.push(Scenario::new("monitor/sends-a-message", |script| {
        script.client("m");
        script.become_monitor("m", &["member='Seen'"]);
        let serial = script.next_serial("m");
        let bytes = signal("FromMonitor").build(serial).expect("builds");
        script.send_expecting_close("m", bytes.to_vec());
    }));
    all.push(Scenario::new("monitor/is-not-a-name", |script| {
        script.client("m");
        script.become_monitor("m", &["member='Seen'"]);
        script.client("a");
        script.bus("a", "ListNames", vec![]);
        let m = script.unique_name("m");
        script.call("a", call_to(&m, "Hi"));
    }));
    all
}
