//! Match rules: each key with a message that matches it and one that does
//! not, invalid rules, and removing rules.

use quickbus_client::{MessageBuilder, Value};

use super::{s, strings, u, Scenario};

/// (case, rule): `b` adds the rule, `a` (com.example.Emitter) emits the
/// signals of [`emit_all`], a unicast signal to `b`, a call to `c` that `c`
/// answers and one that `c` fails; what `b` receives shows what the rule
/// matched.
fn rules() -> Vec<(&'static str, &'static str)> {
    vec![
        ("type-signal", "type='signal'"),
        ("type-method-call", "type='method_call'"),
        ("type-error", "type='error'"),
        ("type-method-return", "type='method_return'"),
        ("sender-well-known", "sender='com.example.Emitter'"),
        ("sender-unique-absent", "sender=':1.999'"),
        ("interface", "interface='com.example.Other'"),
        ("member", "member='Second'"),
        ("path", "path='/a/b'"),
        ("path-namespace", "path_namespace='/a'"),
        ("path-namespace-root", "path_namespace='/'"),
        ("destination-self", "destination=':self'"),
        ("arg0", "arg0='one'"),
        ("arg1", "arg1='two'"),
        ("arg0-empty", "arg0=''"),
        ("arg0path-prefix", "arg0path='/a/'"),
        ("arg0path-exact", "arg0path='/a/b'"),
        ("arg0namespace", "arg0namespace='com.example'"),
        ("arg3", "arg3='four'"),
        ("eavesdrop", "eavesdrop='true'"),
        ("eavesdrop-false", "eavesdrop='false'"),
        (
            "combined",
            "type='signal',interface='com.example.Test',member='First',arg0='one'",
        ),
        ("escaped-quote", r"arg0='it'\''s'"),
        ("spaces", " type = 'signal' , member = 'First' "),
    ]
}

/// Signals from `a` that the rules above pick from, the last one a
/// unicast signal to `c` (only eavesdropping rules show it to others).
fn emit_all(script: &mut crate::script::Script, c: &str) {
    let sig = |path: &str, iface: &str, member: &str, args: Vec<Value>| {
        MessageBuilder::signal(path, iface, member).body(args)
    };
    script.send(
        "a",
        sig("/x", "com.example.Test", "First", vec![s("one"), s("two")]),
    );
    script.send(
        "a",
        sig("/a/b", "com.example.Test", "Second", vec![s("/a/b/c")]),
    );
    script.send(
        "a",
        sig(
            "/a",
            "com.example.Other",
            "Third",
            vec![s("com.example.Sub")],
        ),
    );
    script.send(
        "a",
        sig(
            "/x",
            "com.example.Test",
            "Fourth",
            vec![s("/a/"), u(2), s("three"), s("four")],
        ),
    );
    script.send("a", sig("/x", "com.example.Test", "Quote", vec![s("it's")]));
    script.send("a", sig("/x", "com.example.Test", "Empty", vec![s("")]));
    script.send(
        "a",
        sig("/x", "com.example.Test", "Unicast", vec![]).destination(c),
    );
}

pub fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    for (case, rule) in rules() {
        all.push(Scenario::new(format!("match/{case}"), move |script| {
            script.client("a");
            script.client("b");
            script.client("c");
            script.bus("a", "RequestName", vec![s("com.example.Emitter"), u(0)]);
            let b = script.unique_name("b");
            let c = script.unique_name("c");
            let rule = rule.replace(":self", &b);
            script.bus("b", "AddMatch", vec![s(&rule)]);
            let sig = |member: &str| MessageBuilder::signal("/x", "com.example.Test", member);
            emit_all(script, &c);
            // Unicast to b itself.
            script.send("a", sig("ToB").destination(b.as_str()));
            script.send("a", super::call_to(&c, "Call"));
            script.reply("c", vec![]);
            script.send("a", super::call_to(&c, "Fails"));
            script.reply_error("c", "com.example.Error.Failed");
            script.drain("a");
        }));
    }
    for (case, rule) in [
        ("unknown-key", "color='red'"),
        ("bad-type", "type='nonsense'"),
        ("unquoted-garbage", "type=signal,"),
        ("unterminated-quote", "member='First"),
        ("duplicate-key", "member='A',member='B'"),
        ("arg64", "arg64='x'"),
        ("bad-path", "path='no-slash'"),
        ("path-and-namespace", "path='/a',path_namespace='/a'"),
        ("bad-interface", "interface='nodot'"),
        ("bad-sender", "sender='-x'"),
        ("arg0namespace-bad", "arg0namespace='.bad'"),
        ("eavesdrop-bad", "eavesdrop='maybe'"),
    ] {
        all.push(Scenario::new(
            format!("match-invalid/{case}"),
            move |script| {
                script.client("a");
                script.bus("a", "AddMatch", vec![s(rule)]);
            },
        ));
    }
    all.push(Scenario::new("match/remove-one-of-two-equal", |script| {
        script.client("a");
        script.client("b");
        script.bus("b", "AddMatch", vec![s("member='First'")]);
        script.bus("b", "AddMatch", vec![s("member='First'")]);
        script.send("a", super::signal("First"));
        script.bus("b", "RemoveMatch", vec![s("member='First'")]);
        script.send("a", super::signal("First"));
        script.bus("b", "RemoveMatch", vec![s("member='First'")]);
        script.send("a", super::signal("First"));
        script.bus("b", "RemoveMatch", vec![s("member='First'")]);
        script.drain("b");
    }));
    all.push(Scenario::new(
        "match/remove-differently-spelled",
        |script| {
            script.client("a");
            script.bus("a", "AddMatch", vec![s("type='signal',member='First'")]);
            script.bus("a", "RemoveMatch", vec![s("member='First',type='signal'")]);
        },
    ));
    all.push(Scenario::new("match/name-owner-changed-arg0", |script| {
        script.client("b");
        script.bus(
            "b",
            "AddMatch",
            vec![s(
                "type='signal',member='NameOwnerChanged',arg0='com.example.Watched'",
            )],
        );
        script.client("a");
        script.bus("a", "RequestName", vec![s("com.example.Watched"), u(0)]);
        script.bus("a", "RequestName", vec![s("com.example.Other"), u(0)]);
        script.bus("a", "ReleaseName", vec![s("com.example.Watched")]);
    }));
    all.push(Scenario::new("match/arg0-of-string-array", |script| {
        script.client("a");
        script.client("b");
        script.bus("b", "AddMatch", vec![s("arg0='one'")]);
        script.send("a", super::signal("Array").body(vec![strings(&["one"])]));
        script.send(
            "a",
            super::signal("ObjectPath").body(vec![Value::ObjectPath("/one".into())]),
        );
        script.bus("b", "AddMatch", vec![s("arg0path='/one/'")]);
        script.send(
            "a",
            super::signal("ObjectPath").body(vec![Value::ObjectPath("/one/two".into())]),
        );
        script.drain("b");
    }));
    all
}
