#!/usr/bin/python3
"""Compares the AppArmor guest's results: every case must decide the same,
with the same text, on dbus-daemon and quickbus (as started, and restarted
in place), and each must have written the same AppArmor log lines. The guest must have had AppArmor
enforcing the test profiles, on a kernel without D-Bus mediation (else it
proved nothing): then both daemons allow every case the profiles' dbus
rules would deny, and refuse `required` with dbus-daemon's message."""

import sys

EXPECTED = {
    "mode_required": "refused:exit=1:Failed to start message bus: AppArmor mediation required but not present",
    "mode_enabled": "started",
    "mode_disabled": "started",
    # The client ran confined (the label its socket reports, if the
    # kernel gives one, is then compared between the daemons).
    "self_confinement": "ok:qbtest_client (enforce)",
    "apparmor_feature": "ok:False",
}
ALLOWED = ["hello", "send_allowed", "send_denied_by_profile", "receive_denied_by_profile",
           "bind_open", "bind_denied_by_profile", "eavesdrop_match", "become_monitor"]

lines = open(sys.argv[1], errors="replace").read().splitlines()
QUICKBUSES = ("quickbus", "quickbus-restarted")
results, logs, context = {}, {d: [] for d in ("dbus-daemon",) + QUICKBUSES}, {}
for line in lines:
    parts = line.split(" ", 3)
    if parts[0] == "RESULT" and len(parts) == 4:
        results[(parts[1], parts[2])] = parts[3]
    elif parts[0] == "LOG" and len(parts) >= 3:
        logs.setdefault(parts[1], []).append(line.split(" ", 2)[2])
    elif parts[0] == "CONTEXT":
        print(line)
        key, _, value = line[len("CONTEXT "):].partition(" ")
        context.setdefault(key, []).append(value)
if "DONE" not in lines:
    sys.exit("the guest did not finish: %r" % lines[-5:])

failures = 0


def problem(text):
    global failures
    print(text)
    failures += 1


if context.get("apparmor_enabled") != ["Y"]:
    problem("AppArmor was not enabled in the guest: %r" % context.get("apparmor_enabled"))
if not context.get("dbus_mask", [""])[0].startswith("unreadable"):
    problem("this kernel offers D-Bus mediation (%r): the expectations are for one that does not" % context["dbus_mask"])
for profile in ["qbtest_client (enforce)", "qbtest_service (enforce)"]:
    if profile not in context.get("profile", []):
        problem("profile %s was not loaded: %r" % (profile, context.get("profile")))

cases = sorted({c for (_, c) in results})
for case in cases:
    ref = results.get(("dbus-daemon", case))
    got = {q: results.get((q, case)) for q in QUICKBUSES}
    same = all(g == ref for g in got.values())
    print("%-4s %-26s dbus-daemon: %s" % ("ok" if same else "DIFF", case, ref))
    if not same:
        for q, g in got.items():
            print("%32s %-19s %s" % ("", q + ":", g))
        failures += 1
for case, want in EXPECTED.items():
    if results.get(("dbus-daemon", case)) != want:
        problem("dbus-daemon: %s was %r, expected %r" % (case, results.get(("dbus-daemon", case)), want))
for case in ALLOWED:
    if not (results.get(("dbus-daemon", case)) or "").startswith("ok"):
        problem("dbus-daemon did not allow %s" % case)
for q in QUICKBUSES:
    if logs["dbus-daemon"] != logs[q]:
        problem("AppArmor log lines differ:\n  dbus-daemon: %r\n  %s: %r" % (logs["dbus-daemon"], q, logs[q]))
    else:
        print("AppArmor log lines: %d on dbus-daemon and %s, the same" % (len(logs[q]), q))
if failures:
    sys.exit("%d differences" % failures)
print("%d cases decided the same on dbus-daemon and on quickbus, as started and restarted in place" % len(cases))
