#!/usr/bin/python3
"""A portal-style service for the end-to-end tests (dbus-python + GLib).

It connects to $DBUS_SESSION_BUS_ADDRESS, owns com.example.Portal, exports
/com/example/Portal and prints `ready <unique name> <pid>`. Its one method,

    com.example.Portal.WhoAmI() -> (s instance, u pid)

answers who is calling the way a portal learns it: from the bus's
GetConnectionCredentials for the caller, never from the caller itself.
`instance` is the container instance the bus reports
(org.freedesktop.DBus.Containers1.Instance), "" when the caller did not come
through a container's socket; `pid` is the caller's ProcessID. Each call is
also printed as `whoami <sender> <instance or -> <pid>`.
The service exits when stdin closes.
"""

import os
import sys
import threading

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

NAME = "com.example.Portal"
PATH = "/com/example/Portal"
INSTANCE_KEY = "org.freedesktop.DBus.Containers1.Instance"


def out(*words):
    print(" ".join(str(w) for w in words), flush=True)


class Portal(dbus.service.Object):
    def __init__(self, conn):
        super().__init__(conn, PATH)
        self.conn = conn

    @dbus.service.method(NAME, in_signature="", out_signature="su", sender_keyword="sender")
    def WhoAmI(self, sender):
        credentials = self.conn.call_blocking(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetConnectionCredentials",
            "s",
            (sender,),
        )
        instance = str(credentials.get(INSTANCE_KEY, ""))
        pid = int(credentials["ProcessID"])
        out("whoami", sender, instance or "-", pid)
        return instance, pid


def main():
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    conn = dbus.bus.BusConnection(os.environ["DBUS_SESSION_BUS_ADDRESS"])
    portal = Portal(conn)
    name = dbus.service.BusName(NAME, conn, do_not_queue=True)
    loop = GLib.MainLoop()

    def read_stdin():
        for _ in sys.stdin:
            pass
        GLib.idle_add(loop.quit)

    threading.Thread(target=read_stdin, daemon=True).start()
    out("ready", conn.get_unique_name(), os.getpid())
    loop.run()
    del portal, name


if __name__ == "__main__":
    main()
