#!/usr/bin/python3
"""An activatable service for the end-to-end tests (dbus-python + GLib).

    activated.py NAME [--gate FILE] [--never-own]

It connects to $DBUS_STARTER_ADDRESS (which the bus sets when it starts a
service), exports /org/example/Activated, and takes NAME. With --gate it
first waits until FILE exists, so a test decides when the name appears
(messages sent meanwhile wait in the bus). With --never-own it never takes
the name. It exits when the bus goes away or on Exit().

Methods of org.example.Activated:
    Echo(s) -> s      returns its argument and logs it
    Log() -> as       every Echo argument so far, in arrival order
    Starter() -> as   [$DBUS_STARTER_BUS_TYPE, $DBUS_STARTER_ADDRESS]
    Identity() -> au  [uid, gid, supplementary groups sorted...]
    Exit()
"""

import os
import sys
import time

import dbus
import dbus.bus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

IFACE = "org.example.Activated"
GATE_POLL_SECONDS = 0.01
# A test that failed before opening the gate must not leave us behind.
GATE_GIVE_UP_SECONDS = 120


class Service(dbus.service.Object):
    def __init__(self, conn, loop):
        super().__init__(conn, "/org/example/Activated")
        self.loop = loop
        self.log = []

    @dbus.service.method(IFACE, in_signature="s", out_signature="s")
    def Echo(self, text):
        self.log.append(str(text))
        return text

    @dbus.service.method(IFACE, in_signature="", out_signature="as")
    def Log(self):
        return self.log

    @dbus.service.method(IFACE, in_signature="", out_signature="as")
    def Starter(self):
        return [os.environ.get("DBUS_STARTER_BUS_TYPE", ""),
                os.environ.get("DBUS_STARTER_ADDRESS", "")]

    @dbus.service.method(IFACE, in_signature="", out_signature="au")
    def Identity(self):
        return [os.getuid(), os.getgid()] + sorted(set(os.getgroups()))

    @dbus.service.method(IFACE, in_signature="", out_signature="")
    def Exit(self):
        GLib.idle_add(self.loop.quit)


def main():
    name = sys.argv[1]
    gate = None
    if "--gate" in sys.argv:
        gate = sys.argv[sys.argv.index("--gate") + 1]
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    conn = dbus.bus.BusConnection(os.environ["DBUS_STARTER_ADDRESS"])
    conn.set_exit_on_disconnect(True)
    loop = GLib.MainLoop()
    Service(conn, loop)
    if "--never-own" not in sys.argv:
        give_up = time.monotonic() + GATE_GIVE_UP_SECONDS
        while gate is not None and not os.path.exists(gate):
            if time.monotonic() > give_up:
                sys.exit("the gate never opened")
            time.sleep(GATE_POLL_SECONDS)
        conn.request_name(name, dbus.bus.NAME_FLAG_DO_NOT_QUEUE)
    loop.run()


if __name__ == "__main__":
    main()
