//! Parses arbitrary text as a busconfig file: errors are fine, panics are
//! not. Texts that include other files are skipped (they would read
//! whatever path the fuzzer invents, /dev/zero included).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.contains("include") {
        return;
    }
    let _ = quickbus_daemon::config::parse_str(text, "/nonexistent/fuzz.conf");
});
