#!/usr/bin/python3
"""A scriptable D-Bus peer for the end-to-end tests (dbus-python + GLib).

It connects to $DBUS_SESSION_BUS_ADDRESS, prints `ready <unique name> <pid>`,
then reads one command per line on stdin and prints one result line per
command. Every signal delivered to the connection is printed as an event line:

    signal <interface>.<member> path=<path> sender=<sender> dest=<dest|-> args=<json>

Commands (JSON arguments are converted by dbus-python using the signature,
`-` is the empty signature):

    bus METHOD SIG JSON_ARGS            call org.freedesktop.DBus: `bus METHOD <json reply>`
    call DEST PATH IFACE METHOD SIG JSON_ARGS      `call <json reply>`
    call_noreply DEST PATH IFACE METHOD SIG JSON_ARGS  send with NO_REPLY_EXPECTED: `call_noreply sent`
    emit JSON                           {"path","iface","member","dest"?,"sender"?,"args":[[sig, value],...]}
    emit_numbered COUNT JSON            COUNT signals {"path","iface","member"} carrying 0..COUNT-1
    serve PATH                          export the com.example.Test object: `serve ok`
    sendfd DEST PATH TEXT               write TEXT into a pipe, pass its read end to
                                        com.example.Test.ReadFd: `sendfd <json reply>`
    ping                                round trip to the bus: `pong`
    spy                                 report messages addressed to others (see below; a spy
                                        must own no well-known name): `spy ok`
    timeout SECONDS                     how long later calls wait for their reply: `timeout ok`

A failed call prints `error <D-Bus error name> <message>` instead. Method calls
served by the exported object are printed as `called <Method> <json args> no_reply=<bool>`.
After `spy`, a method call, return or error addressed to another connection
(one an eavesdropping match rule brought) is printed, and not answered, as

    eavesdropped <type> <interface>.<member or error name> sender=<sender> dest=<dest> args=<json>
The peer exits when stdin closes.
"""

import json
import os
import sys
import threading

import dbus
import dbus.lowlevel
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

BUS = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")
TEST_IFACE = "com.example.Test"


def out(*words):
    print(" ".join(str(w) for w in words), flush=True)


def plain(value):
    """dbus-python values as plain Python (dbus.Boolean is an int subclass)."""
    if isinstance(value, dbus.Boolean):
        return bool(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (str, float)) or value is None:
        return value
    return str(value)


def to_json(value):
    return json.dumps(plain(value))


def signature(word):
    """`-` stands for the empty signature on the command line."""
    return "" if word == "-" else word


class FailedError(dbus.DBusException):
    _dbus_error_name = "com.example.Error.Failed"


class TestObject(dbus.service.Object):
    """What the tests call: echo, a deliberate error, a one-way call, a call
    never answered, an fd reader."""

    @dbus.service.method(TEST_IFACE, in_signature="s", out_signature="s", message_keyword="msg")
    def Echo(self, text, msg):
        out("called", "Echo", to_json([text]), "no_reply=%s" % msg.get_no_reply())
        return text

    @dbus.service.method(TEST_IFACE, in_signature="", out_signature="", message_keyword="msg")
    def Fail(self, msg):
        out("called", "Fail", "[]", "no_reply=%s" % msg.get_no_reply())
        raise FailedError("failed on purpose")

    @dbus.service.method(TEST_IFACE, in_signature="s", out_signature="", message_keyword="msg")
    def Record(self, text, msg):
        out("called", "Record", to_json([text]), "no_reply=%s" % msg.get_no_reply())

    @dbus.service.method(
        TEST_IFACE,
        in_signature="",
        out_signature="",
        message_keyword="msg",
        async_callbacks=("reply", "error"),
    )
    def Hang(self, msg, reply, error):
        """Never answers: the caller learns only what the bus tells it."""
        out("called", "Hang", "[]", "no_reply=%s" % msg.get_no_reply())

    @dbus.service.method(TEST_IFACE, in_signature="h", out_signature="s", message_keyword="msg")
    def ReadFd(self, fd, msg):
        raw = fd.take()
        chunks = []
        while True:
            chunk = os.read(raw, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(raw)
        text = b"".join(chunks).decode()
        out("called", "ReadFd", to_json([text]), "no_reply=%s" % msg.get_no_reply())
        return text


class Peer:
    def __init__(self, conn):
        self.conn = conn
        self.objects = []
        self.timeout = 60
        self.spying = False
        conn.add_message_filter(self.on_message)

    def eavesdropped(self, msg):
        """A non-signal addressed to another connection. A spy owns no
        well-known name, so anything not addressed to its unique name is
        someone else's."""
        if not self.spying or msg.get_type() == dbus.lowlevel.MESSAGE_TYPE_SIGNAL:
            return False
        return msg.get_destination() not in (None, self.conn.get_unique_name())

    def on_message(self, _conn, msg):
        if self.eavesdropped(msg):
            kinds = {
                dbus.lowlevel.MESSAGE_TYPE_METHOD_CALL: "method_call",
                dbus.lowlevel.MESSAGE_TYPE_METHOD_RETURN: "method_return",
                dbus.lowlevel.MESSAGE_TYPE_ERROR: "error",
            }
            what = msg.get_error_name() or "%s.%s" % (msg.get_interface(), msg.get_member())
            out(
                "eavesdropped",
                kinds.get(msg.get_type(), "unknown"),
                what,
                "sender=%s" % msg.get_sender(),
                "dest=%s" % msg.get_destination(),
                "args=%s" % to_json(msg.get_args_list()),
            )
            # Not ours to answer: libdbus would reply UnknownMethod.
            return dbus.lowlevel.HANDLER_RESULT_HANDLED
        if msg.get_type() == dbus.lowlevel.MESSAGE_TYPE_SIGNAL:
            out(
                "signal",
                "%s.%s" % (msg.get_interface(), msg.get_member()),
                "path=%s" % msg.get_path(),
                "sender=%s" % msg.get_sender(),
                "dest=%s" % (msg.get_destination() or "-"),
                "args=%s" % to_json(msg.get_args_list()),
            )
        return dbus.lowlevel.HANDLER_RESULT_NOT_YET_HANDLED

    def call(self, dest, path, iface, method, sig, args):
        return self.conn.call_blocking(dest, path, iface, method, sig, tuple(args), timeout=self.timeout)

    def run(self, line):
        words = line.split(" ")
        op = words[0]
        try:
            if op == "bus":
                method, sig, args = words[1], signature(words[2]), json.loads(" ".join(words[3:]))
                out("bus", method, to_json(self.call(*BUS, method, sig, args)))
            elif op == "call":
                dest, path, iface, method = words[1:5]
                sig = signature(words[5])
                args = json.loads(" ".join(words[6:]))
                out("call", to_json(self.call(dest, path, iface, method, sig, args)))
            elif op == "call_noreply":
                dest, path, iface, method = words[1:5]
                sig = signature(words[5])
                args = json.loads(" ".join(words[6:]))
                msg = dbus.lowlevel.MethodCallMessage(dest, path, iface, method)
                msg.set_no_reply(True)
                msg.append(*args, signature=sig)
                self.conn.send_message(msg)
                self.conn.flush()
                out("call_noreply", "sent")
            elif op == "emit":
                spec = json.loads(" ".join(words[1:]))
                msg = dbus.lowlevel.SignalMessage(spec["path"], spec["iface"], spec["member"])
                if spec.get("dest"):
                    msg.set_destination(spec["dest"])
                if spec.get("sender"):  # a forgery the bus must overwrite
                    msg.set_sender(spec["sender"])
                args = spec.get("args", [])
                if args:
                    msg.append(*[v for _, v in args], signature="".join(s for s, _ in args))
                self.conn.send_message(msg)
                self.conn.flush()
                out("emit", "sent")
            elif op == "emit_numbered":
                count, spec = int(words[1]), json.loads(" ".join(words[2:]))
                for number in range(count):
                    msg = dbus.lowlevel.SignalMessage(spec["path"], spec["iface"], spec["member"])
                    msg.append(dbus.UInt32(number), signature="u")
                    self.conn.send_message(msg)
                self.conn.flush()
                out("emit_numbered", "sent", count)
            elif op == "serve":
                self.objects.append(TestObject(self.conn, words[1]))
                out("serve", "ok")
            elif op == "sendfd":
                dest, path, text = words[1], words[2], " ".join(words[3:])
                read_end, write_end = os.pipe()
                os.write(write_end, text.encode())
                os.close(write_end)
                fd = dbus.types.UnixFd(read_end)  # dbus-python keeps its own duplicate
                os.close(read_end)
                out("sendfd", to_json(self.call(dest, path, TEST_IFACE, "ReadFd", "h", [fd])))
            elif op == "timeout":
                self.timeout = float(words[1])
                out("timeout", "ok")
            elif op == "spy":
                self.spying = True
                out("spy", "ok")
            elif op == "ping":
                self.call(*BUS, "GetId", "", [])
                out("pong")
            else:
                out("error", "peer.UnknownCommand", op)
        except dbus.DBusException as err:
            out("error", err.get_dbus_name(), err.get_dbus_message())
        except Exception as err:  # a bad command must not leave the test waiting
            out("error", "peer.Exception", repr(err))
        return False


def read_commands(loop, peer):
    for line in sys.stdin:
        GLib.idle_add(peer.run, line.rstrip("\n"))
    GLib.idle_add(loop.quit)


def main():
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    conn = dbus.bus.BusConnection(os.environ["DBUS_SESSION_BUS_ADDRESS"])
    peer = Peer(conn)
    loop = GLib.MainLoop()
    threading.Thread(target=read_commands, args=(loop, peer), daemon=True).start()
    out("ready", conn.get_unique_name(), os.getpid())
    loop.run()


if __name__ == "__main__":
    main()
