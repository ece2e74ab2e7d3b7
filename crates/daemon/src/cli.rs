//! dbus-daemon compatible command line.
