//! The driver's introspection XML, byte for byte as it was when the method
//! table was a separate list (dbus-daemon 1.14's text, as the differential
//! harness compares it): the files here were written by that version,
//! and /org/freedesktop/DBus has quickbus's own interface
//! (org.quickbus.Daemon1, restarting in place) after dbus-daemon's; the
//! Containers1 interface is the text of dbus-daemon 1.14.10 built with
//! containers (checked against it).

use crate::introspection_xml;

#[test]
fn introspection_is_unchanged_at_every_path() {
    let cases = [
        (
            "/org/freedesktop/DBus",
            include_str!("introspection/org_freedesktop_DBus.xml"),
        ),
        ("/", include_str!("introspection/root.xml")),
        ("/org", include_str!("introspection/org.xml")),
        (
            "/org/freedesktop",
            include_str!("introspection/org_freedesktop.xml"),
        ),
        ("/x", include_str!("introspection/x.xml")),
    ];
    for (path, expected) in cases {
        assert_eq!(introspection_xml(path), expected, "at {path}");
    }
}
