//! Feeds arbitrary bytes to the SASL server the way the event loop does:
//! in chunks (sizes from the first byte), keeping what it did not consume.
//! It must never panic, never consume more than it was given, and stop at
//! the first error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quickbus_daemon::auth::{AuthConfig, AuthProgress, SaslServer};

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, data)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let mut config = AuthConfig::new("0123456789abcdef0123456789abcdef");
    config.allow_anonymous = data.len() % 2 == 0;
    let mut server = SaslServer::new(&config, 1000);
    let mut input = Vec::new();
    let mut reply = Vec::new();
    for piece in data.chunks(chunk) {
        input.extend_from_slice(piece);
        let consumed = match server.feed(&input, &mut reply) {
            Ok(AuthProgress::NeedMore { consumed }) => consumed,
            Ok(AuthProgress::Begin { consumed }) => {
                assert!(consumed <= input.len());
                assert!(server.authenticated().is_some(), "BEGIN without OK");
                return;
            }
            Err(_) => return,
        };
        assert!(consumed <= input.len());
        input.drain(..consumed);
    }
});
