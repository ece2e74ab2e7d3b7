//! Rough throughput of parse, stamp and build on typical messages:
//! `cargo run --release -p quickbus-wire --example bench_parse [FILTER]`.
//! A measurement tool, not a test: numbers depend on the machine.

use std::hint::black_box;
use std::time::Instant;

use quickbus_wire::{Message, MessageBuilder, Value};

fn properties_changed() -> MessageBuilder {
    let props = (0..8)
        .map(|i| {
            Value::DictEntry(
                Box::new(Value::String(format!("Property{i}"))),
                Box::new(Value::Variant(Box::new(Value::Uint32(i)))),
            )
        })
        .collect();
    MessageBuilder::signal(
        "/org/example/Object",
        "org.freedesktop.DBus.Properties",
        "PropertiesChanged",
    )
    .sender(":1.42")
    .body(vec![
        Value::String("org.example.Iface".into()),
        Value::Array {
            elem_sig: "{sv}".into(),
            items: props,
        },
        Value::Array {
            elem_sig: "s".into(),
            items: vec![],
        },
    ])
}

fn blob(size: usize) -> MessageBuilder {
    MessageBuilder::method_call("/org/example/Object", "Put")
        .destination("org.example.Service")
        .body(vec![Value::Array {
            elem_sig: "y".into(),
            items: vec![Value::Byte(7); size],
        }])
}

/// The worst shape for a validator that re-splits signatures per element.
fn nested_structs(count: usize) -> MessageBuilder {
    let mut value = Value::Byte(1);
    let mut sig = "y".to_string();
    for _ in 0..32 {
        value = Value::Struct(vec![value]);
        sig = format!("({sig})");
    }
    MessageBuilder::method_return(1).body(vec![Value::Array {
        elem_sig: sig,
        items: vec![value; count],
    }])
}

fn measure(name: &str, bytes: usize, iterations: u32, mut f: impl FnMut()) {
    // An optional argument keeps only the measurements whose name contains it.
    if let Some(filter) = std::env::args().nth(1) {
        if !name.contains(&filter) {
            return;
        }
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let per = start.elapsed() / iterations;
    let mib_s = bytes as f64 / per.as_secs_f64() / (1024.0 * 1024.0);
    println!("{name:40} {per:>10.2?}/op  {mib_s:>10.0} MiB/s");
}

fn main() {
    for (name, builder) in [
        ("PropertiesChanged", properties_changed()),
        ("64 KiB ay", blob(64 * 1024)),
        ("array of 1000 strings", {
            MessageBuilder::method_return(1).body(vec![Value::Array {
                elem_sig: "s".into(),
                items: (0..1000).map(|i| Value::String(format!("s{i}"))).collect(),
            }])
        }),
        ("10000 structs nested 32 deep", nested_structs(10_000)),
    ] {
        let raw = builder.build(1).unwrap();
        let n = 200_000 / (1 + raw.len() as u32 / 512);
        measure(
            &format!("parse {name} ({} B)", raw.len()),
            raw.len(),
            n,
            || {
                black_box(Message::parse(black_box(raw.clone())).unwrap());
            },
        );
        let message = Message::parse(raw.clone()).unwrap();
        measure(&format!("stamp {name}"), raw.len(), n, || {
            black_box(black_box(&message).stamp(":1.1234"));
        });
        measure(&format!("build {name}"), raw.len(), n / 4 + 1, || {
            black_box(builder.build(1).unwrap());
        });
    }
}
