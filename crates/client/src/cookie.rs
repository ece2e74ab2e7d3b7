//! The client's side of DBUS_COOKIE_SHA1: read the cookie the server names
//! from our keyring (`~/.dbus-keyrings/<context>`, as libdbus and GDBus
//! read it) and prove we know it without sending it.

use std::path::{Path, PathBuf};

use crate::sasl::hex;
use sha1::{Digest, Sha1};

/// What we answer to the server's challenge `data` ("<context> <cookie id>
/// <server challenge>", already hex-decoded): "<our challenge> <hash>", or
/// None if the challenge is malformed or the cookie is not in `home`'s
/// keyring. `our_challenge` must be fresh randomness (hex).
pub fn answer(home: &Path, data: &str, our_challenge: &str) -> Option<String> {
    let mut words = data.split(' ');
    let (context, id, server_challenge) = (words.next()?, words.next()?, words.next()?);
    if words.next().is_some() || !valid_context(context) || server_challenge.is_empty() {
        return None;
    }
    let id: u32 = id.parse().ok()?;
    let keyring = std::fs::read_to_string(home.join(".dbus-keyrings").join(context)).ok()?;
    let cookie = keyring.lines().find_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        (fields.next()?.parse() == Ok(id))
            .then(|| fields.nth(1))
            .flatten()
    })?;
    let hash = Sha1::digest(format!("{server_challenge}:{our_challenge}:{cookie}"));
    Some(format!("{our_challenge} {}", hex(&hash)))
}

/// libdbus's rule for a context name: it becomes a file name in our
/// keyring directory, so nothing that could leave it.
fn valid_context(context: &str) -> bool {
    !context.is_empty()
        && context.is_ascii()
        && !context
            .bytes()
            .any(|b| matches!(b, b'/' | b'\\' | b'.' | b' ' | b'\n' | b'\r' | b'\t'))
}

/// Our home: /etc/passwd's entry for our uid (as libdbus), else $HOME.
pub fn home() -> Option<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() >= 6 && fields[2].parse() == Ok(uid) && !fields[5].is_empty())
                .then(|| PathBuf::from(fields[5]))
        })
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
}

/// 16 random bytes in hex: our half of the challenge.
pub fn challenge() -> Option<String> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    Some(hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_hashes_both_challenges_and_the_cookie() {
        let home = std::env::temp_dir().join(format!("qb-client-cookie-{}", std::process::id()));
        std::fs::create_dir_all(home.join(".dbus-keyrings")).unwrap();
        std::fs::write(
            home.join(".dbus-keyrings/org_freedesktop_general"),
            "7 1700000000 00ff\n42 1700000001 abcd\n",
        )
        .unwrap();
        let got = answer(&home, "org_freedesktop_general 42 srv", "cli").unwrap();
        let hash = hex(&Sha1::digest("srv:cli:abcd"));
        assert_eq!(got, format!("cli {hash}"));
        assert_eq!(answer(&home, "org_freedesktop_general 9 srv", "cli"), None);
        assert_eq!(answer(&home, "../etc 42 srv", "cli"), None);
        assert_eq!(answer(&home, "org_freedesktop_general 42", "cli"), None);
        std::fs::remove_dir_all(&home).unwrap();
    }
}
