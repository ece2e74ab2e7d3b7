#!/usr/bin/env python3
"""N calls from A to B over the bus at ADDRESS (its daemon PID), each
carrying one fd (a memfd) that B closes: prints the daemon's CPU seconds
(user + system, all threads, from /proc/PID/stat) spent on them.
Used by scripts/fd-cost.sh."""
import multiprocessing
import os
import sys
import time
import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

addr, pid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tick = os.sysconf("SC_CLK_TCK")

def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)

class Echo(dbus.service.Object):
    @dbus.service.method("org.example.Fd", in_signature="h", out_signature="")
    def Take(self, fd):
        os.close(fd.take())

def serve(ready):
    bus = dbus.bus.BusConnection(addr)
    bus.request_name("org.example.FdEcho")
    Echo(bus, "/e")
    ready.set()
    GLib.MainLoop().run()

ready = multiprocessing.Event()
p = multiprocessing.Process(target=serve, args=(ready,), daemon=True)
p.start(); ready.wait()
caller = dbus.bus.BusConnection(addr)
proxy = caller.get_object("org.example.FdEcho", "/e")
take = proxy.get_dbus_method("Take", "org.example.Fd")
mfd = os.memfd_create("x")
before = cpu()
t0 = time.time()
for _ in range(n):
    take(dbus.types.UnixFd(mfd))
t1 = time.time()
after = cpu()
print(f"calls {n} wall {t1-t0:.2f}s daemon_cpu {after-before:.2f}s per_call_us {1e6*(after-before)/n:.1f}")
p.terminate()
