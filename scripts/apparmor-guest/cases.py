#!/usr/bin/python3
"""The AppArmor guest test's cases, run inside the guest against
dbus-daemon and quickbus-daemon with the same configuration. The client
runs confined by the profile qbtest_client (aa-exec), one service by
qbtest_service (scripts/apparmor-guest/qbtest). Writes `CONTEXT` lines (is
AppArmor enforcing, does the kernel mediate D-Bus), `RESULT daemon case
outcome` lines and `LOG daemon line` lines (every AppArmor line either
daemon wrote, standard error and journal) to the file given (the second
serial port), then `DONE`.

quickbus runs the cases twice: as it starts, and as "quickbus-restarted",
restarted in place (org.quickbus.Daemon1.Restart) after the services have
connected, so that their labels cross the restart and the new image's
AppArmor handle decides."""

import os
import re
import subprocess
import sys
import time

import dbus
import dbus.bus

QUICKBUS = "/usr/local/bin/quickbus-daemon"
# (name in the results, binary, restart in place before the client runs)
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
    <allow eavesdrop="true"/>
  </policy>
  {apparmor}
</busconfig>
"""
SERVICES = [(None, "org.example.Service"), (None, "org.example.Hidden"),
            ("qbtest_service", "org.example.Deaf")]


def confined(profile, *args):
    cmd = [sys.executable, __file__] + list(args)
    return (["aa-exec", "-p", profile, "--"] + cmd) if profile else cmd


def serve(address, name):
    """A service answering every call with an empty return."""
    from gi.repository import GLib
    from dbus.mainloop.glib import DBusGMainLoop

    DBusGMainLoop(set_as_default=True)
    conn = dbus.bus.BusConnection(address)

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


def bus_call(conn, iface, member, sig="", args=()):
    return conn.call_blocking("org.freedesktop.DBus", "/org/freedesktop/DBus",
                              iface, member, sig, args, timeout=10)


def label_of(conn, name):
    creds = bus_call(conn, "org.freedesktop.DBus", "GetConnectionCredentials", "s", (name,))
    label = creds.get("LinuxSecurityLabel")
    return bytes(label).rstrip(b"\0").decode() if label is not None else "none"


def client(address):
    """The confined client's cases, one `case outcome` line each."""
    def emit(case, result):
        print(case, result, flush=True)

    with open("/proc/self/attr/current") as f:
        emit("self_confinement", "ok:" + f.read().strip("\0\n"))
    conn = dbus.bus.BusConnection(address)
    emit("hello", "ok")
    ping = lambda name: conn.call_blocking(
        name, "/", "org.example.Test", "Ping", "", (), timeout=10) or "reply"
    emit("send_allowed", outcome(lambda: ping("org.example.Service")))
    emit("send_denied_by_profile", outcome(lambda: ping("org.example.Hidden")))
    emit("receive_denied_by_profile", outcome(lambda: ping("org.example.Deaf")))
    emit("bind_open", outcome(lambda: conn.request_name("org.example.Open")))
    emit("bind_denied_by_profile", outcome(lambda: conn.request_name("org.example.Secret")))
    emit("eavesdrop_match", outcome(lambda: bus_call(
        conn, "org.freedesktop.DBus", "AddMatch", "s", ("eavesdrop=true,type='method_call'",)) or "added"))
    emit("client_label", outcome(lambda: label_of(conn, conn.get_unique_name())))
    emit("service_label", outcome(lambda: label_of(conn, "org.example.Deaf")))
    emit("apparmor_feature", outcome(lambda: "AppArmor" in bus_call(
        conn, "org.freedesktop.DBus.Properties", "Get", "ss", ("org.freedesktop.DBus", "Features"))))
    monitor = dbus.bus.BusConnection(address)
    emit("become_monitor", outcome(lambda: bus_call(
        monitor, "org.freedesktop.DBus.Monitoring", "BecomeMonitor", "asu", ([], 0)) or "monitor"))


def wait_owned(control, name):
    for _ in range(300):
        if control.name_has_owner(name):
            return
        time.sleep(0.1)
    raise RuntimeError("%s never appeared" % name)


def start(path, name, apparmor):
    conf = "/run/qbtest-%s.conf" % name
    with open(conf, "w") as f:
        f.write(CONFIG.format(name=name, apparmor=apparmor))
    return subprocess.Popen([path, "--config-file=" + conf, "--nofork", "--print-address"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def strip_prefix(line):
    """`dbus-daemon[42]: text` and `quickbus-daemon[42]: text` alike."""
    return re.sub(r"^[\w.-]+\[\d+\]: ", "", line)


def startup_cases(name, path, emit):
    for mode in ["required", "enabled", "disabled"]:
        daemon = start(path, name, '<apparmor mode="%s"/>' % mode)
        address = daemon.stdout.readline().strip()
        # dbus-daemon prints its address before it decides on AppArmor:
        # started means it answers Hello.
        try:
            dbus.bus.BusConnection(address).get_unique_name() if address else None
            serving = bool(address)
        except dbus.exceptions.DBusException:
            serving = False
        if serving:
            daemon.terminate()
            daemon.wait()
            emit("mode_%s" % mode, "started")
            continue
        err = daemon.stderr.read()
        code = daemon.wait()
        lines = [strip_prefix(l) for l in err.splitlines()]
        failed = [l for l in lines if "Failed to start message bus" in l] or lines
        emit("mode_%s" % mode, "refused:exit=%d:%s" % (code, " | ".join(failed)))


def journal_lines():
    out = subprocess.run(["journalctl", "-b", "-o", "cat", "--no-pager"],
                         capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if 'operation="dbus_' in l]


def restart_in_place(control):
    """Returns once the new image serves (the reply comes from it)."""
    control.call_blocking("org.freedesktop.DBus", "/org/freedesktop/DBus",
                          "org.quickbus.Daemon1", "Restart", "", (), timeout=120)


def run_cases(name, path, emit, log, restart):
    before = len(journal_lines())
    daemon = start(path, name, "")
    address = daemon.stdout.readline().strip()
    if not address:
        emit("start", "error:no-address:%s" % daemon.stderr.read())
        return
    control = dbus.bus.BusConnection(address)  # unconfined
    services = []
    try:
        for profile, svc in SERVICES:
            services.append(subprocess.Popen(confined(profile, "serve", address, svc)))
            wait_owned(control, svc)
        if restart:
            restart_in_place(control)
        got = subprocess.run(confined("qbtest_client", "client", address),
                             capture_output=True, text=True, timeout=120)
        for line in got.stdout.splitlines():
            case, _, result = line.partition(" ")
            emit(case, result)
        if got.returncode != 0:
            emit("client", "crash:%d:%s" % (got.returncode, got.stderr.strip().splitlines()[-1:]))
    finally:
        for s in services:
            s.kill()
            s.wait()
        daemon.terminate()
        daemon.wait()
    for line in daemon.stderr.read().splitlines():
        if 'apparmor="' in line or "AppArmor" in line:
            log(strip_prefix(line))
    for line in journal_lines()[before:]:
        log("journal: " + line)


def context(out):
    def read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as e:
            return "unreadable(%s)" % e.strerror
    out.write("CONTEXT apparmor_enabled %s\n" % read("/sys/module/apparmor/parameters/enabled"))
    out.write("CONTEXT dbus_mask %s\n" % read("/sys/kernel/security/apparmor/features/dbus/mask"))
    profiles = read("/sys/kernel/security/apparmor/profiles").splitlines()
    for p in profiles:
        if p.startswith("qbtest_"):
            out.write("CONTEXT profile %s\n" % p)
    out.write("CONTEXT profiles_loaded %d\n" % len(profiles))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(*sys.argv[2:4])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        client(sys.argv[2])
        return
    out = open(sys.argv[1], "w", buffering=1)
    # apparmor.service loads /etc/apparmor.d at boot; load ours again in
    # case the boot's cache skipped it (a failure shows in the context).
    subprocess.run(["apparmor_parser", "-r", "/etc/apparmor.d/qbtest"])
    context(out)
    for name, path, restart in RUNS:
        def emit(case, result):
            out.write("RESULT %s %s %s\n" % (name, case, result))

        def log(line):
            out.write("LOG %s %s\n" % (name, line))
        try:
            startup_cases(name, path, emit)
            run_cases(name, path, emit, log, restart)
        except Exception as e:  # noqa: the host reports it
            out.write("RESULT %s crash error:%r\n" % (name, e))
    out.write("DONE\n")


if __name__ == "__main__":
    main()
