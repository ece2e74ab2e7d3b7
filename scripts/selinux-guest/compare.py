#!/usr/bin/python3
"""Compares the guest's results: every case must decide the same, with the
same text, on dbus-daemon and quickbus (as started, and restarted in
place), in each mode; dbus-daemon must
have denied what the module denies when enforcing (else the guest proved
nothing). Prints the cost per call."""

import sys

EXPECTED_DENIED = {"nobus_hello", "call_denied", "reply_withheld", "own_secret"}

lines = open(sys.argv[1], errors="replace").read().splitlines()
results, costs, avcs = {}, [], {}
for line in lines:
    parts = line.split(" ", 4)
    if parts[0] == "RESULT" and len(parts) == 5:
        results[(parts[1], parts[2], parts[3])] = parts[4]
    elif parts[0] == "AVC" and len(parts) >= 4:
        record = line.split(" ", 3)[3]
        avcs.setdefault((parts[1], parts[2]), []).append(record)
    elif parts[0] == "COST" and len(parts) == 5:
        costs.append(parts[1:])
    elif parts[0] in ("CONTEXT",):
        print(line)
if "DONE" not in lines:
    sys.exit("the guest did not finish: %r" % lines[-5:])

QUICKBUSES = ("quickbus", "quickbus-restarted")
failures = 0
cases = sorted({(m, c) for (_, m, c) in results})
for mode, case in cases:
    ref = results.get(("dbus-daemon", mode, case))
    got = {q: results.get((q, mode, case)) for q in QUICKBUSES}
    same = all(g == ref for g in got.values())
    print("%-4s %-10s %-20s dbus-daemon: %s" % ("ok" if same else "DIFF", mode, case, ref))
    if not same:
        for q, g in got.items():
            print("%38s %-19s %s" % ("", q + ":", g))
        failures += 1
for case in EXPECTED_DENIED:
    ref = results.get(("dbus-daemon", "enforcing", case), "")
    if not ref.startswith("error:"):
        print("dbus-daemon did not deny %s when enforcing: the policy module is not in force" % case)
        failures += 1
# The AVC records: the same ones, in the same order, from both daemons.
for mode in ("enforcing", "permissive"):
    ref = avcs.get(("dbus-daemon", mode), [])
    for q in QUICKBUSES:
        got = avcs.get((q, mode), [])
        same = ref == got
        print("%-4s %-10s %-20s %d records (%s)" % ("ok" if same else "DIFF", mode, "AVC records", len(ref), q))
        if not same:
            print("%38s %s wrote:" % ("", q))
            for record in got:
                print("%38s %s" % ("", record))
            failures += 1
    for record in ref:
        print("%38s %s" % ("", record))
    if not ref:
        print("dbus-daemon wrote no AVC record when %s: nothing was compared" % mode)
        failures += 1
for daemon, mode, _, usec in costs:
    print("cost per call, %s, SELinux %s: %s µs" % (daemon, mode, usec))
if failures:
    sys.exit("%d differences" % failures)
print("%d cases decided the same on dbus-daemon and on quickbus, as started and restarted in place" % len(cases))
