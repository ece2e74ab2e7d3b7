//! Writes a few valid messages of every type, in both byte orders, as seed
//! inputs for the fuzzer: `cargo run -p quickbus-wire --example fuzz_seeds -- DIR`.

use quickbus_wire::{Endian, MessageBuilder, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: fuzz_seeds DIR")?;
    std::fs::create_dir_all(&dir)?;
    let dict = Value::Array {
        elem_sig: "{sv}".into(),
        items: vec![Value::DictEntry(
            Box::new(Value::String("k".into())),
            Box::new(Value::Variant(Box::new(Value::Struct(vec![
                Value::Int16(-1),
                Value::Double(0.5),
                Value::ObjectPath("/o".into()),
            ])))),
        )],
    };
    let every_type = vec![
        Value::Byte(1),
        Value::Bool(true),
        Value::Uint16(2),
        Value::Int32(-3),
        Value::Uint64(4),
        Value::String("five".into()),
        Value::Signature("a(ii)".into()),
        Value::UnixFd(0),
        dict,
        Value::Array {
            elem_sig: "ay".into(),
            items: vec![Value::Array {
                elem_sig: "y".into(),
                items: vec![Value::Byte(6); 3],
            }],
        },
    ];
    let messages = [
        MessageBuilder::method_call("/org/freedesktop/DBus", "Hello")
            .interface("org.freedesktop.DBus")
            .destination("org.freedesktop.DBus"),
        MessageBuilder::method_call("/a/b", "Frob")
            .sender(":1.9")
            .unix_fds(1)
            .header_field(42, Value::Uint32(1))
            .body(every_type.clone()),
        MessageBuilder::method_return(3).body(vec![Value::String(":1.9".into())]),
        MessageBuilder::error(3, "org.example.Error").body(vec![Value::String("no".into())]),
        MessageBuilder::signal("/s", "org.example.I", "Changed")
            .destination("org.example.Peer")
            .unix_fds(1)
            .body(every_type),
    ];
    for (i, builder) in messages.iter().enumerate() {
        for (endian, tag) in [(Endian::Little, "le"), (Endian::Big, "be")] {
            let bytes = builder.clone().endian(endian).build(i as u32 + 1)?;
            std::fs::write(format!("{dir}/seed-{i}-{tag}"), &bytes)?;
        }
    }
    Ok(())
}
