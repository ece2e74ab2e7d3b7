//! Routing between peers: calls, replies, errors, unicast and broadcast
//! signals, and calls nobody can answer.

use quickbus_client::MessageBuilder;
use quickbus_wire::flags;

use super::{call_to, s, signal, u, Scenario};

pub fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    all.push(Scenario::new("route/call-and-reply", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send("a", call_to(&b, "Echo").body(vec![s("hi"), u(7)]));
        script.reply("b", vec![s("hi"), u(7)]);
        script.drain("a");
    }));
    all.push(Scenario::new("route/call-and-error", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send("a", call_to(&b, "Fail"));
        script.reply_error("b", "com.example.Error.Failed");
        script.drain("a");
    }));
    all.push(Scenario::new("route/reply-twice", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        let serial = script.next_serial("a");
        let call = call_to(&b, "Echo").build(serial).expect("builds");
        script.send_raw("a", call.to_vec(), &[]);
        script.reply("b", vec![]);
        // The same reply again: nobody expects it any more.
        let a = script.unique_name("a");
        script.send(
            "b",
            MessageBuilder::method_return(serial).destination(a.as_str()),
        );
        script.drain("a");
    }));
    all.push(Scenario::new("route/unsolicited-reply", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send(
            "a",
            MessageBuilder::method_return(1234).destination(b.as_str()),
        );
        script.send(
            "a",
            MessageBuilder::error(1234, "com.example.Error.X").destination(b.as_str()),
        );
        script.drain("b");
    }));
    // dbus-daemon "optimises" a policy: a receive rule without conditions
    // removes every receive rule before it, eavesdrop="true" or not, so
    // <allow receive_sender="*"/> after <allow eavesdrop="true"/> makes
    // unrequested replies unreceivable.
    all.push(
        Scenario::new("policy/unconditional-rule-drops-earlier-ones", |script| {
            script.client("a");
            script.client("b");
            let b = script.unique_name("b");
            script.send(
                "a",
                MessageBuilder::method_return(1234).destination(b.as_str()),
            );
            script.drain("b");
        })
        .config(r#"<policy context="default"><allow receive_sender="*"/></policy>"#),
    );
    all.push(Scenario::new("route/call-unknown-well-known", |script| {
        script.client("a");
        script.call("a", call_to("com.example.Nobody", "Hi"));
    }));
    all.push(Scenario::new("route/call-unknown-unique", |script| {
        script.client("a");
        script.call("a", call_to(":1.999", "Hi"));
    }));
    all.push(Scenario::new(
        "route/call-unknown-no-reply-expected",
        |script| {
            script.client("a");
            script.send(
                "a",
                call_to("com.example.Nobody", "Hi").flags(flags::NO_REPLY_EXPECTED),
            );
        },
    ));
    all.push(Scenario::new(
        "route/call-unknown-no-auto-start",
        |script| {
            script.client("a");
            script.call(
                "a",
                call_to("com.example.Nobody", "Hi").flags(flags::NO_AUTO_START),
            );
        },
    ));
    all.push(Scenario::new("route/no-reply-expected-call", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send("a", call_to(&b, "Quiet").flags(flags::NO_REPLY_EXPECTED));
        // b answers anyway: the bus drops the reply.
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all.push(Scenario::new("route/call-without-interface", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send(
            "a",
            MessageBuilder::method_call("/x", "Bare").destination(b.as_str()),
        );
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all.push(Scenario::new("route/call-to-self", |script| {
        script.client("a");
        let a = script.unique_name("a");
        script.send("a", call_to(&a, "Self"));
        script.reply("a", vec![s("me")]);
        script.drain("a");
    }));
    all.push(Scenario::new("route/unicast-signal", |script| {
        script.client("a");
        script.client("b");
        script.client("c");
        script.bus("c", "AddMatch", vec![s("type='signal'")]);
        let b = script.unique_name("b");
        script.send("a", signal("Direct").destination(b.as_str()));
        script.drain("b");
    }));
    all.push(Scenario::new("route/unicast-signal-unknown", |script| {
        script.client("a");
        script.send("a", signal("Lost").destination(":1.999"));
        script.send("a", signal("Lost").destination("com.example.Nobody"));
    }));
    all.push(Scenario::new("route/signal-to-driver", |script| {
        script.client("a");
        script.send("a", signal("ToDriver").destination("org.freedesktop.DBus"));
    }));
    all.push(Scenario::new("route/broadcast-no-listener", |script| {
        script.client("a");
        script.send("a", signal("Nobody"));
    }));
    all.push(Scenario::new("route/broadcast-to-sender-too", |script| {
        script.client("a");
        script.bus("a", "AddMatch", vec![s("type='signal'")]);
        script.send("a", signal("Echoed"));
    }));
    all.push(Scenario::new("route/flags-kept", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send(
            "a",
            call_to(&b, "Interactive").flags(flags::ALLOW_INTERACTIVE_AUTHORIZATION),
        );
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all.push(Scenario::new("route/spoofed-sender", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send("a", call_to(&b, "Who").sender("org.freedesktop.DBus"));
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all.push(Scenario::new("route/big-endian", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send(
            "a",
            call_to(&b, "Big")
                .endian(quickbus_wire::Endian::Big)
                .body(vec![u(0x0102_0304), s("big")]),
        );
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all.push(Scenario::new("route/unknown-header-field", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        script.send("a", call_to(&b, "Extra").header_field(42, s("extra")));
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all
}
