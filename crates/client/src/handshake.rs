//! Driving the SASL exchange (crate::sasl) over the socket: EXTERNAL with
//! our uid, NEGOTIATE_UNIX_FD and BEGIN pipelined in one write, then the
//! server's replies read until the message stream starts.

use crate::error::Error;
use crate::sasl::{self, Authenticated, Mode, Progress, SaslClient};
use crate::transport::Transport;

pub(crate) fn authenticate(transport: &mut Transport) -> Result<Authenticated, Error> {
    let mut to_send = Vec::new();
    let mut client = SaslClient::start(sasl::current_uid(), Mode::Pipelined, true, &mut to_send);
    loop {
        if !to_send.is_empty() {
            transport.write_all(&[&to_send], &[])?;
            to_send.clear();
        }
        let progress = client
            .feed(transport.input(), &mut to_send)
            .map_err(|e| Error::Auth(e.to_string()))?;
        match progress {
            Progress::Done { consumed, outcome } => {
                // Whatever follows is the start of the message stream.
                transport.consume(consumed);
                return Ok(outcome);
            }
            Progress::NeedMore { consumed } => {
                transport.consume(consumed);
                transport.read_more(0)?;
            }
        }
    }
}
