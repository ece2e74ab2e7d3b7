#!/usr/bin/env python3
"""Differential check: does libdbus (dbus_message_demarshal, through ctypes)
accept the same inputs as quickbus-wire's Message::parse? Prints every input
on which they disagree, except the known, intended differences:
- libdbus's demarshal cannot carry fds, so it refuses any UNIX_FDS > 0;
- quickbus refuses unknown message types with a distinct error so the
  daemon can drop them, where libdbus's loader keeps them;
- quickbus parses exactly one message, libdbus ignores trailing bytes.
(quickbus used to check every `h` index against UNIX_FDS while validating;
like libdbus it now leaves that to whoever reads the value.)

Usage: differential.py PARSE_FILES_BINARY [--mutate N] FILE...
(PARSE_FILES_BINARY: the `parse_files` example of quickbus-wire; --mutate N
also tries N random few-byte corruptions of the given files)."""

import ctypes, os, random, subprocess, sys, tempfile


class DBusError(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("message", ctypes.c_char_p),
                ("dummy", ctypes.c_uint), ("padding1", ctypes.c_void_p)]


libdbus = ctypes.CDLL("libdbus-1.so.3")
libdbus.dbus_message_demarshal.restype = ctypes.c_void_p
libdbus.dbus_message_demarshal.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(DBusError)]
libdbus.dbus_message_unref.argtypes = [ctypes.c_void_p]


def libdbus_verdict(data):
    error = DBusError()
    libdbus.dbus_error_init(ctypes.byref(error))
    message = libdbus.dbus_message_demarshal(data, len(data), ctypes.byref(error))
    if message:
        libdbus.dbus_message_unref(message)
        return True, ""
    reason = (error.message or b"").decode(errors="replace")
    libdbus.dbus_error_free(ctypes.byref(error))
    return False, reason


def mutants(files, count):
    """Write `count` corrupted copies of random `files` to a temporary dir."""
    rng = random.Random(1)
    originals = [open(f, "rb").read() for f in files]
    directory = tempfile.mkdtemp()
    paths = []
    for i in range(count):
        data = bytearray(rng.choice(originals))
        for _ in range(rng.randint(1, 3)):
            if data:
                data[rng.randrange(len(data))] = rng.choice([0, 1, 2, 0xff, rng.randrange(256)])
        path = os.path.join(directory, f"mutant-{i}")
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
    return paths


def known_difference(ours, theirs):
    intended = ("unknown message type", "bytes after the end")
    return ("Unix file descriptor missing" in theirs[1]
            or (theirs[0] and any(reason in ours[1] for reason in intended)))


def main():
    binary, files = sys.argv[1], sys.argv[2:]
    if files[:1] == ["--mutate"]:
        count, files = int(files[1]), files[2:]
        files = files + mutants(files, count)
    ours = {}
    for i in range(0, len(files), 500):
        out = subprocess.run([binary] + files[i:i + 500], capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            verdict, path, *reason = line.split(" ", 2)
            ours[path] = (verdict == "OK", reason[0] if reason else "")
    disagreements = 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        theirs = libdbus_verdict(data)
        if theirs[0] != ours[path][0] and not known_difference(ours[path], theirs):
            disagreements += 1
            print(f"{path}: quickbus {'accepts' if ours[path][0] else 'refuses (' + ours[path][1] + ')'}, "
                  f"libdbus {'accepts' if theirs[0] else 'refuses (' + theirs[1] + ')'}")
    print(f"{len(files)} inputs, {disagreements} disagreements")


main()
