#!/usr/bin/python3
"""The SELinux guest test's cases, run inside the guest against
dbus-daemon and quickbus-daemon with the same configuration, enforcing
then permissive. Each peer's socket gets its label with setsockcreatecon
(the label SO_PEERSEC reports), so no process changes domain. Writes
`RESULT daemon mode case outcome` lines and `COST` lines to the file given
(the second serial port), then `DONE`. Also `AVC daemon mode record`
lines: the SELinux AVC records (`tclass=dbus`) the journal got while that
daemon ran, whatever way they took there (dbus-daemon's USER_AVC through
the audit socket and the kernel log, quickbus's through its standard
error), with the process ids taken out.

quickbus runs the cases twice: as it starts, and as "quickbus-restarted",
restarted in place (org.quickbus.Daemon1.Restart) after the services and
the clients have connected, so that their labels cross the restart and the
new image's SELinux handle decides."""

import json
import os
import re
import subprocess
import sys
import time

import dbus
import dbus.bus
import selinux

QUICKBUS = "/usr/local/bin/quickbus-daemon"
# (name in the results, binary, restart in place before the cases)
RUNS = [
    ("dbus-daemon", "/usr/bin/dbus-daemon", False),
    ("quickbus", QUICKBUS, False),
    ("quickbus-restarted", QUICKBUS, True),
]
CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=/run/qbtest-{name}.sock</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
  <selinux>
    <associate own="org.example.Secret" context="system_u:object_r:qb_secret_name_t:s0"/>
  </selinux>
</busconfig>
"""


def ctx(t):
    return "system_u:system_r:%s:s0" % t


def connect(address, label):
    selinux.setsockcreatecon_raw(ctx(label))
    try:
        return dbus.bus.BusConnection(address)
    finally:
        selinux.setsockcreatecon_raw(None)


def serve(address, label, name):
    """A service answering every call with an empty return."""
    from gi.repository import GLib
    from dbus.mainloop.glib import DBusGMainLoop

    DBusGMainLoop(set_as_default=True)
    selinux.setsockcreatecon_raw(ctx(label))
    conn = dbus.bus.BusConnection(address)
    selinux.setsockcreatecon_raw(None)

    def answer(c, msg):
        if isinstance(msg, dbus.lowlevel.MethodCallMessage):
            c.send_message(dbus.lowlevel.MethodReturnMessage(msg))
        return dbus.lowlevel.HANDLER_RESULT_HANDLED

    conn.add_message_filter(answer)
    conn.request_name(name)
    GLib.MainLoop().run()


def outcome(f):
    try:
        return "ok:%s" % (f(),)
    except dbus.exceptions.DBusException as e:
        text = re.sub(r"pid=\d+", "pid=N", e.get_dbus_message() or "")
        return "error:%s:%s" % (e.get_dbus_name(), text)


AVC_KEYS = ("msgtype", "interface", "member", "error_name", "dest", "service",
            "scontext", "tcontext", "tclass", "permissive")


def journal_cursor():
    subprocess.run(["journalctl", "--sync"], check=False)
    out = subprocess.run(["journalctl", "-n", "0", "--show-cursor"],
                         capture_output=True, text=True).stdout
    return out.strip().rsplit("cursor: ", 1)[-1]


def avc_records(cursor):
    """The dbus AVC records logged since `cursor`, as `denied { perm }`
    and the fields both daemons give (not pids, exe or audit ids), in
    the order they came. A USER_AVC reaches the journal twice, from the
    audit socket and again as the kernel's printk of it: the kernel's
    copies are left out."""
    subprocess.run(["journalctl", "--sync"], check=False)
    out = subprocess.run(["journalctl", "-o", "json", "--after-cursor", cursor],
                         capture_output=True, text=True, errors="replace").stdout
    records = []
    for entry in out.splitlines():
        entry = json.loads(entry)
        if entry.get("_TRANSPORT") == "kernel":
            continue
        line = entry.get("MESSAGE") or ""
        if isinstance(line, list):
            line = bytes(line).decode(errors="replace")
        m = re.search(r"avc:\s+(\w+)\s+\{\s*([^}]*?)\s*\}\s+for\s+(.*)", line)
        if not m or "tclass=dbus" not in line:
            continue
        fields = dict(re.findall(r"(\w+)=(\"[^\"]*\"|\S+)", m.group(3)))
        kept = " ".join("%s=%s" % (k, fields[k].strip("'")) for k in AVC_KEYS if k in fields)
        records.append("%s { %s } %s" % (m.group(1), m.group(2), kept))
    return records


def wait_owned(control, name):
    for _ in range(300):
        if control.name_has_owner(name):
            return
        time.sleep(0.1)
    raise RuntimeError("%s never appeared" % name)


def restart_in_place(control):
    """Returns once the new image serves (the reply comes from it)."""
    control.call_blocking("org.freedesktop.DBus", "/org/freedesktop/DBus",
                          "org.quickbus.Daemon1", "Restart", "", (), timeout=120)


def run_cases(address, emit, restart):
    control = dbus.bus.BusConnection(address)  # unconfined_t
    services = []
    for label, name in [("qb_service_t", "org.example.Service"),
                        ("qb_secret_t", "org.example.Hidden"),
                        ("qb_mute_t", "org.example.Mute")]:
        services.append(subprocess.Popen(
            [sys.executable, __file__, "serve", address, label, name]))
        wait_owned(control, name)
    try:
        client = connect(address, "qb_client_t")
        service = connect(address, "qb_service_t")
        if restart:
            restart_in_place(control)
        emit("nobus_hello", outcome(lambda: connect(address, "qb_nobus_t").get_unique_name() and "hello"))
        emit("client_hello", "ok")
        ping = lambda c, name, timeout=10: c.call_blocking(
            name, "/", "org.example.Test", "Ping", "", (), timeout=timeout) or "reply"
        emit("call_allowed", outcome(lambda: ping(client, "org.example.Service")))
        emit("call_denied", outcome(lambda: ping(client, "org.example.Hidden")))
        emit("reply_withheld", outcome(lambda: ping(client, "org.example.Mute", 3)))
        emit("own_open", outcome(lambda: client.request_name("org.example.Open")))
        emit("own_secret", outcome(lambda: client.request_name("org.example.Secret")))
        emit("service_own_secret", outcome(lambda: service.request_name("org.example.Secret")))
        n = 500
        started = time.monotonic()
        for _ in range(n):
            ping(client, "org.example.Service")
        emit("cost_usec_per_call", "%d" % ((time.monotonic() - started) / n * 1e6), cost=True)
    finally:
        for s in services:
            s.kill()
            s.wait()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(*sys.argv[2:5])
        return
    out = open(sys.argv[1], "w", buffering=1)
    out.write("CONTEXT %s ENFORCE %d\n" % (selinux.getcon_raw()[1], selinux.security_getenforce()))
    for mode in ["enforcing", "permissive"]:
        selinux.security_setenforce(1 if mode == "enforcing" else 0)
        for name, path, restart in RUNS:
            cursor = journal_cursor()
            conf = "/run/qbtest-%s.conf" % name
            with open(conf, "w") as f:
                f.write(CONFIG.format(name=name))
            daemon = subprocess.Popen([path, "--config-file=" + conf, "--nofork", "--print-address"],
                                      stdout=subprocess.PIPE, text=True)
            address = daemon.stdout.readline().strip()
            if not address:
                out.write("RESULT %s %s start error:no-address\n" % (name, mode))
                continue

            def emit(case, result, cost=False):
                kind = "COST" if cost else "RESULT"
                out.write("%s %s %s %s %s\n" % (kind, name, mode, case, result))
            try:
                run_cases(address, emit, restart)
            except Exception as e:  # noqa: the host reports it
                out.write("RESULT %s %s crash error:%r\n" % (name, mode, e))
            daemon.terminate()
            daemon.wait()
            for record in avc_records(cursor):
                out.write("AVC %s %s %s\n" % (name, mode, record))
    out.write("DONE\n")


if __name__ == "__main__":
    main()
