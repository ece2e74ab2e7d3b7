//! Validators for the names the D-Bus specification defines: bus names,
//! interfaces, members, error names, object paths and signatures.

use crate::Error;

/// Longest bus, interface, member or error name.
pub const MAX_NAME_LEN: usize = 255;

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Dot-separated elements, at least two, each non-empty, made of
/// `[A-Za-z0-9_]` (plus `-` when `dash` is set), not starting with a digit
/// unless `digit_first` is set.
fn dotted(name: &[u8], dash: bool, digit_first: bool) -> bool {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return false;
    }
    // One pass over the bytes (this runs for every header field of every
    // message; splitting into elements first cost twice as much).
    let mut dots = 0;
    let mut element_start = true;
    for &c in name {
        if c == b'.' {
            if element_start {
                return false;
            }
            dots += 1;
            element_start = true;
        } else {
            if !(is_name_char(c) || (dash && c == b'-')) {
                return false;
            }
            if element_start && !digit_first && c.is_ascii_digit() {
                return false;
            }
            element_start = false;
        }
    }
    !element_start && dots >= 1
}

/// A unique (`:1.42`) or well-known (`org.example.Service`) bus name.
pub fn is_valid_bus_name(name: &str) -> bool {
    bus_name_bytes(name.as_bytes())
}

/// A unique connection name: `:` then dotted elements that may start with a digit.
pub fn is_valid_unique_name(name: &str) -> bool {
    unique_name_bytes(name.as_bytes())
}

/// A well-known bus name such as `org.example.Service`.
pub fn is_valid_well_known_name(name: &str) -> bool {
    well_known_name_bytes(name.as_bytes())
}

/// An interface name such as `org.freedesktop.DBus`.
pub fn is_valid_interface(name: &str) -> bool {
    interface_bytes(name.as_bytes())
}

/// An error name; same rules as interface names.
pub fn is_valid_error_name(name: &str) -> bool {
    interface_bytes(name.as_bytes())
}

/// A member (method or signal) name: one element, no dots.
pub fn is_valid_member(name: &str) -> bool {
    member_bytes(name.as_bytes())
}

/// An object path: `/`, or `/`-separated non-empty `[A-Za-z0-9_]` elements.
pub fn is_valid_object_path(path: &str) -> bool {
    object_path_bytes(path.as_bytes())
}

/// A bus name as dbus-daemon checks one in a match rule's `sender` or
/// `destination` (`_dbus_validate_bus_name`): a well-known name as in
/// [`is_valid_well_known_name`], but a unique name only needs `:` then name
/// characters, an element after a dot may start with a digit (`:1`, even
/// `:`, pass). Match rules keep this looseness because clients see it.
pub fn is_valid_match_bus_name(name: &str) -> bool {
    dbus_bus_name(name.as_bytes(), false)
}

/// A match rule's `arg0namespace` (`_dbus_validate_bus_namespace`): as
/// [`is_valid_match_bus_name`], but a name without a dot passes (`org`).
pub fn is_valid_bus_namespace(name: &str) -> bool {
    dbus_bus_name(name.as_bytes(), true)
}

/// libdbus's bus-name check, byte for byte; `namespace` drops the need for
/// a dot.
fn dbus_bus_name(bytes: &[u8], namespace: bool) -> bool {
    fn name_char(c: u8) -> bool {
        is_name_char(c) || c == b'-'
    }
    fn initial_char(c: u8) -> bool {
        name_char(c) && !c.is_ascii_digit()
    }
    if bytes.is_empty() || bytes.len() > MAX_NAME_LEN {
        return false;
    }
    let unique = bytes[0] == b':';
    if !unique && !initial_char(bytes[0]) {
        return false;
    }
    // After a dot a unique name's element may start with a digit.
    let element_start = if unique { name_char } else { initial_char };
    let mut saw_dot = false;
    let mut i = 1;
    while i < bytes.len() {
        if bytes[i] == b'.' {
            if !bytes.get(i + 1).is_some_and(|&c| element_start(c)) {
                return false;
            }
            saw_dot = true;
            i += 1;
        } else if !name_char(bytes[i]) {
            return false;
        }
        i += 1;
    }
    unique || namespace || saw_dot
}

// The same checks on raw bytes, for the header parser: it validates a
// name field before (instead of) checking it is UTF-8. Each accepts only
// ASCII characters, so bytes that pass are valid UTF-8 as well
// (Message::str_at relies on it).

pub(crate) fn bus_name_bytes(name: &[u8]) -> bool {
    unique_name_bytes(name) || well_known_name_bytes(name)
}

fn unique_name_bytes(name: &[u8]) -> bool {
    name.len() <= MAX_NAME_LEN
        && name
            .strip_prefix(b":")
            .is_some_and(|rest| dotted(rest, true, true))
}

fn well_known_name_bytes(name: &[u8]) -> bool {
    !name.starts_with(b":") && dotted(name, true, false)
}

pub(crate) fn interface_bytes(name: &[u8]) -> bool {
    dotted(name, false, false)
}

pub(crate) fn member_bytes(name: &[u8]) -> bool {
    match name.first() {
        None => false,
        Some(first) if first.is_ascii_digit() => false,
        Some(_) => name.len() <= MAX_NAME_LEN && name.iter().all(|&c| is_name_char(c)),
    }
}

pub(crate) fn object_path_bytes(path: &[u8]) -> bool {
    if path == b"/" {
        return true;
    }
    let Some(rest) = path.strip_prefix(b"/") else {
        return false;
    };
    // One pass, as in `dotted`.
    let mut element_start = true;
    for &c in rest {
        if c == b'/' {
            if element_start {
                return false;
            }
            element_start = true;
        } else if is_name_char(c) {
            element_start = false;
        } else {
            return false;
        }
    }
    !element_start
}

/// A type signature: zero or more complete types, at most 255 bytes and
/// within the nesting limits.
pub fn validate_signature(signature: &str) -> Result<(), Error> {
    crate::signature::validate(signature.as_bytes())
}

/// [`validate_signature`] as a bool.
pub fn is_valid_signature(signature: &str) -> bool {
    validate_signature(signature).is_ok()
}

/// Exactly one complete type (what a variant may hold).
pub fn is_valid_single_signature(signature: &str) -> bool {
    crate::signature::validate_single(signature.as_bytes()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_rule_bus_names_are_as_loose_as_libdbus() {
        for name in [
            ":",
            ":1",
            ":1.2",
            ":.1",
            ":a-b",
            "org.example",
            "a-b.c_d",
            "_.x",
        ] {
            assert!(is_valid_match_bus_name(name), "{name}");
        }
        for name in [
            "", "org", "1a.b", "a..b", "a.", ".a", "a.1b", ":1..2", ":1.", "a b.c", "a/b.c",
        ] {
            assert!(!is_valid_match_bus_name(name), "{name}");
        }
        assert!(!is_valid_match_bus_name(&format!("a.{}", "b".repeat(254))));
        // A namespace needs no dot; the other rules stay.
        assert!(is_valid_bus_namespace("org") && is_valid_bus_namespace("org.example"));
        assert!(!is_valid_bus_namespace("org.") && !is_valid_bus_namespace("1org"));
        // Stricter elsewhere: a bus name in a header needs a dot.
        assert!(!is_valid_bus_name(":1") && is_valid_bus_name(":1.2"));
    }

    /// The element-splitting definitions the one-pass validators replaced.
    mod reference {
        use super::super::{is_name_char, MAX_NAME_LEN};

        pub fn dotted(name: &str, dash: bool, digit_first: bool) -> bool {
            !name.is_empty()
                && name.len() <= MAX_NAME_LEN
                && name.split('.').count() >= 2
                && name.split('.').all(|e| {
                    e.as_bytes()
                        .first()
                        .is_some_and(|f| digit_first || !f.is_ascii_digit())
                        && e.bytes().all(|c| is_name_char(c) || (dash && c == b'-'))
                })
        }

        pub fn object_path(path: &str) -> bool {
            path == "/"
                || path.strip_prefix('/').is_some_and(|rest| {
                    rest.split('/')
                        .all(|e| !e.is_empty() && e.bytes().all(is_name_char))
                })
        }
    }

    /// Every string of up to five characters over an alphabet with one of
    /// each kind of character the validators treat differently.
    fn short_strings() -> Vec<String> {
        let alphabet = ['a', 'Z', '1', '_', '-', '.', '/', ':', ' '];
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..5 {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn one_pass_validators_agree_with_the_element_definitions() {
        for s in short_strings() {
            for (dash, digit_first) in [(false, false), (true, false), (true, true)] {
                assert_eq!(
                    dotted(s.as_bytes(), dash, digit_first),
                    reference::dotted(&s, dash, digit_first),
                    "{s:?} dash={dash} digit_first={digit_first}"
                );
            }
            assert_eq!(
                is_valid_object_path(&s),
                reference::object_path(&s),
                "{s:?}"
            );
        }
        let long = format!("a.{}", "b".repeat(MAX_NAME_LEN - 2));
        assert!(dotted(long.as_bytes(), false, false));
        assert!(!dotted(format!("{long}c").as_bytes(), false, false));
    }

    #[test]
    fn bus_names() {
        for good in [
            ":1.0",
            ":1.42",
            ":a.b-c",
            "org.freedesktop.DBus",
            "a.b",
            "a-b.c_d",
            "_a._b",
            "org.example.x1",
        ] {
            assert!(is_valid_bus_name(good), "{good}");
        }
        for bad in [
            "",
            ":",
            ":1",
            ":1.",
            ":.1",
            "org",
            "org.",
            ".org.x",
            "org..x",
            "1org.x",
            "org.1x",
            "org.ex ample",
            "org.é.x",
            "org/x.y",
        ] {
            assert!(!is_valid_bus_name(bad), "{bad}");
        }
        let long = format!("a.{}", "b".repeat(253));
        assert_eq!(long.len(), 255);
        assert!(is_valid_bus_name(&long));
        assert!(!is_valid_bus_name(&format!("{long}c")));
        let long_unique = format!(":1.{}", "2".repeat(252));
        assert!(is_valid_unique_name(&long_unique));
        assert!(!is_valid_unique_name(&format!("{long_unique}3")));
    }

    #[test]
    fn unique_versus_well_known() {
        assert!(is_valid_unique_name(":1.5"));
        assert!(!is_valid_unique_name("org.x"));
        assert!(is_valid_well_known_name("org.x"));
        assert!(!is_valid_well_known_name(":1.5"));
    }

    #[test]
    fn interfaces_and_errors() {
        for good in ["org.freedesktop.DBus", "a.b", "a_1.b_2", "_.x"] {
            assert!(is_valid_interface(good), "{good}");
            assert!(is_valid_error_name(good), "{good}");
        }
        for bad in [
            "", "org", "org.", "org..x", "org.1x", "org.a-b", ":1.2", "a.b c",
        ] {
            assert!(!is_valid_interface(bad), "{bad}");
            assert!(!is_valid_error_name(bad), "{bad}");
        }
        let long = format!("a.{}", "b".repeat(254));
        assert!(!is_valid_interface(&long));
        assert!(is_valid_interface(&long[..255]));
    }

    #[test]
    fn members() {
        for good in ["Hello", "a", "_x", "Get_1"] {
            assert!(is_valid_member(good), "{good}");
        }
        for bad in ["", "1a", "a.b", "a-b", "a b", "é"] {
            assert!(!is_valid_member(bad), "{bad}");
        }
        assert!(is_valid_member(&"m".repeat(255)));
        assert!(!is_valid_member(&"m".repeat(256)));
    }

    #[test]
    fn object_paths() {
        for good in ["/", "/a", "/org/freedesktop/DBus", "/a_1/B2/_"] {
            assert!(is_valid_object_path(good), "{good}");
        }
        for bad in ["", "a", "//", "/a/", "/a//b", "/a-b", "/a.b", "/é"] {
            assert!(!is_valid_object_path(bad), "{bad}");
        }
    }

    #[test]
    fn signatures() {
        assert!(is_valid_signature(""));
        assert!(is_valid_signature("a{sv}as(ii)v"));
        assert!(!is_valid_signature("a{vs}"));
        assert!(is_valid_single_signature("a{sv}"));
        assert!(!is_valid_single_signature("ss"));
        assert!(!is_valid_single_signature(""));
    }
}
