//! Driving the SASL exchange over the socket: EXTERNAL with our uid,
//! NEGOTIATE_UNIX_FD, BEGIN.

use crate::error::Error;
use crate::transport::Transport;

pub(crate) struct Outcome {
    pub guid: String,
    pub unix_fds: bool,
}

pub(crate) fn authenticate(transport: &mut Transport) -> Result<Outcome, Error> {
    let uid = rustix::process::getuid().as_raw();
    let hex_uid: String = uid
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    // The protocol starts with one nul byte (it can carry credentials on
    // some systems; Linux uses SO_PEERCRED instead).
    let hello = format!("\0AUTH EXTERNAL {hex_uid}\r\n");
    transport.write_all(&[hello.as_bytes()], &[])?;
    let line = transport.read_line()?;
    let guid = match line.strip_prefix("OK ") {
        Some(guid) => guid.trim().to_owned(),
        None => {
            return Err(Error::Auth(format!(
                "server answered {line:?} to AUTH EXTERNAL"
            )))
        }
    };
    transport.write_all(&[b"NEGOTIATE_UNIX_FD\r\n"], &[])?;
    let line = transport.read_line()?;
    let unix_fds = line == "AGREE_UNIX_FD";
    if !unix_fds && !line.starts_with("ERROR") {
        return Err(Error::Auth(format!(
            "server answered {line:?} to NEGOTIATE_UNIX_FD"
        )));
    }
    transport.write_all(&[b"BEGIN\r\n"], &[])?;
    Ok(Outcome { guid, unix_fds })
}
