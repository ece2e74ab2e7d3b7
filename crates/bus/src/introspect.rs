//! The driver's interfaces as data, and the introspection XML generated
//! from them and from the driver's method table ([`crate::driver::METHODS`],
//! which dispatch uses too, as dbus-daemon and dbus-broker do), so the two
//! cannot disagree.
//!
//! Owns: the interface descriptions. May touch: the driver's method
//! table, read-only.

use std::fmt::Write;

/// A driver method as clients see it.
pub(crate) struct MethodSpec {
    pub interface: &'static str,
    pub name: &'static str,
    pub in_sig: &'static str,
    pub out_sig: &'static str,
    /// Available on every object path, not only /org/freedesktop/DBus.
    pub any_path: bool,
    /// Only for callers with the bus's uid or root.
    pub privileged: bool,
    /// Not for a connection that came through a container's socket
    /// (dbus-daemon's `METHOD_FLAG_NO_CONTAINERS`).
    pub no_containers: bool,
}

pub(crate) struct PropertySpec {
    pub name: &'static str,
    pub sig: &'static str,
}

pub(crate) struct InterfaceSpec {
    pub name: &'static str,
    pub properties: &'static [PropertySpec],
    pub signals_xml: &'static str,
    pub any_path: bool,
}

/// The driver's interfaces, in the order introspection lists them.
pub(crate) const INTERFACES: &[InterfaceSpec] = &[
    InterfaceSpec {
        name: "org.freedesktop.DBus",
        properties: &[
            PropertySpec {
                name: "Features",
                sig: "as",
            },
            PropertySpec {
                name: "Interfaces",
                sig: "as",
            },
        ],
        signals_xml: "    <signal name=\"NameOwnerChanged\">\n      <arg type=\"s\"/>\n      <arg type=\"s\"/>\n      <arg type=\"s\"/>\n    </signal>\n    <signal name=\"NameLost\">\n      <arg type=\"s\"/>\n    </signal>\n    <signal name=\"NameAcquired\">\n      <arg type=\"s\"/>\n    </signal>\n    <signal name=\"ActivatableServicesChanged\">\n    </signal>\n",
        any_path: true,
    },
    InterfaceSpec {
        name: "org.freedesktop.DBus.Properties",
        properties: &[],
        signals_xml: "    <signal name=\"PropertiesChanged\">\n      <arg type=\"s\" name=\"interface_name\"/>\n      <arg type=\"a{sv}\" name=\"changed_properties\"/>\n      <arg type=\"as\" name=\"invalidated_properties\"/>\n    </signal>\n",
        any_path: false,
    },
    InterfaceSpec {
        name: "org.freedesktop.DBus.Introspectable",
        properties: &[],
        signals_xml: "",
        any_path: true,
    },
    InterfaceSpec {
        name: "org.freedesktop.DBus.Monitoring",
        properties: &[],
        signals_xml: "",
        any_path: false,
    },
    InterfaceSpec {
        name: "org.freedesktop.DBus.Debug.Stats",
        properties: &[],
        signals_xml: "",
        any_path: false,
    },
    InterfaceSpec {
        name: "org.freedesktop.DBus.Containers1",
        properties: &[PropertySpec {
            name: "SupportedArguments",
            sig: "as",
        }],
        signals_xml: "    <signal name=\"InstanceRemoved\">\n      <arg type=\"o\" name=\"path\"/>\n    </signal>\n",
        any_path: false,
    },
    InterfaceSpec {
        name: "org.freedesktop.DBus.Peer",
        properties: &[],
        signals_xml: "",
        any_path: true,
    },
    // quickbus's own: restarting in place (docs/restart.md).
    InterfaceSpec {
        name: crate::DAEMON_INTERFACE,
        properties: &[],
        signals_xml: "",
        any_path: false,
    },
];

/// Interfaces worth listing in the `Interfaces` property: optional
/// features a client may want to probe for. The always-present ones
/// (DBus, Properties, Introspectable, Peer) are left out, as dbus-daemon
/// does.
pub(crate) const INTERESTING_INTERFACES: &[&str] = &[
    "org.freedesktop.DBus.Monitoring",
    "org.freedesktop.DBus.Debug.Stats",
    "org.freedesktop.DBus.Containers1",
];

const DOCTYPE: &str = "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n\"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n";

/// Split a valid signature into its complete types.
fn complete_types(sig: &str) -> Vec<&str> {
    let bytes = sig.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'(' | b'{' => depth += 1,
            b')' | b'}' => depth -= 1,
            _ => {}
        }
        if depth == 0 && b != b'a' {
            out.push(&sig[start..=i]);
            start = i + 1;
        }
    }
    out
}

/// Introspection XML of `path` on the bus driver.
pub(crate) fn introspect(path: &str) -> String {
    introspect_methods(path, crate::driver::method_specs())
}

/// Introspection XML of `path` for these methods.
fn introspect_methods<'a>(
    path: &str,
    methods: impl Iterator<Item = &'a MethodSpec> + Clone,
) -> String {
    let canonical = path == crate::BUS_PATH;
    let mut xml = String::from(DOCTYPE);
    xml.push_str("<node>\n");
    for iface in INTERFACES.iter().filter(|i| canonical || i.any_path) {
        let _ = writeln!(xml, "  <interface name=\"{}\">", iface.name);
        for method in methods.clone().filter(|m| m.interface == iface.name) {
            let _ = writeln!(xml, "    <method name=\"{}\">", method.name);
            for t in complete_types(method.in_sig) {
                let _ = writeln!(xml, "      <arg direction=\"in\" type=\"{t}\"/>");
            }
            for t in complete_types(method.out_sig) {
                let _ = writeln!(xml, "      <arg direction=\"out\" type=\"{t}\"/>");
            }
            xml.push_str("    </method>\n");
        }
        for prop in iface.properties {
            let _ = writeln!(
                xml,
                "    <property name=\"{}\" type=\"{}\" access=\"read\">",
                prop.name, prop.sig
            );
            xml.push_str("      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"const\"/>\n    </property>\n");
        }
        xml.push_str(iface.signals_xml);
        xml.push_str("  </interface>\n");
    }
    // Make the driver's object discoverable from its ancestors.
    match path {
        "/" => xml.push_str("  <node name=\"org/freedesktop/DBus\"/>\n"),
        "/org" => xml.push_str("  <node name=\"freedesktop/DBus\"/>\n"),
        "/org/freedesktop" => xml.push_str("  <node name=\"DBus\"/>\n"),
        _ => {}
    }
    xml.push_str("</node>\n");
    xml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_signatures_into_complete_types() {
        assert_eq!(complete_types(""), Vec::<&str>::new());
        assert_eq!(complete_types("su"), vec!["s", "u"]);
        assert_eq!(complete_types("a{sv}as(ii)"), vec!["a{sv}", "as", "(ii)"]);
        assert_eq!(complete_types("aa{s(ay)}v"), vec!["aa{s(ay)}", "v"]);
    }

    #[test]
    fn canonical_path_lists_every_interface() {
        let xml = introspect("/org/freedesktop/DBus");
        assert!(xml.starts_with("<!DOCTYPE node PUBLIC"));
        for iface in INTERFACES {
            assert!(xml.contains(&format!("<interface name=\"{}\">", iface.name)));
        }
        assert!(xml.contains(
            "    <method name=\"RequestName\">\n      <arg direction=\"in\" type=\"s\"/>\n      <arg direction=\"in\" type=\"u\"/>\n      <arg direction=\"out\" type=\"u\"/>\n    </method>\n"
        ));
        assert!(xml.contains("<property name=\"Features\" type=\"as\" access=\"read\">"));
        assert!(xml.ends_with("  </interface>\n</node>\n"));
    }

    #[test]
    fn other_paths_hide_properties_and_point_to_the_driver() {
        let root = introspect("/");
        assert!(!root.contains("org.freedesktop.DBus.Properties"));
        assert!(root.contains("<interface name=\"org.freedesktop.DBus.Peer\">"));
        assert!(root.contains("  <node name=\"org/freedesktop/DBus\"/>\n"));
        assert!(introspect("/org").contains("<node name=\"freedesktop/DBus\"/>"));
        assert!(introspect("/org/freedesktop").contains("<node name=\"DBus\"/>"));
        assert!(!introspect("/x").contains("<node name="));
    }
}
