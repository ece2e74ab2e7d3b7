//! Prints, for each file given, whether `Message::parse` accepts it:
//! `OK <path>` or `ERR <path> <reason>`. Used by fuzz/differential.py to
//! compare quickbus-wire with libdbus on the fuzzing corpus.

use quickbus_wire::Message;

fn main() -> std::io::Result<()> {
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path)?;
        match Message::parse(bytes.into()) {
            Ok(_) => println!("OK {path}"),
            Err(e) => println!("ERR {path} {e}"),
        }
    }
    Ok(())
}
