# shellcheck shell=bash
# Sourced by scripts/test.sh (bash): its steps, the log of the steps that
# run tests, and the closing report. Whether the run passes or fails, the
# report ends it: on a failure, which step failed and that the steps after
# it did not run; in every case, what did not run in the steps that did
# (ignored tests, skips allowed by QUICKBUS_ALLOW_SKIP, the suites' own
# skips), so neither a failure nor a skip is ever reported as a clean run.

# The step running now, named in the report if it fails, and when it
# started ($SECONDS), so that the log says how long each step took.
current_step="(before the first step)"
step_started=

step() {
    step_took
    current_step=$*
    step_started=$SECONDS
    printf '\n==> %s\n' "$*"
}

# How long the step running now has taken, printed when it ends (the next
# step starts, or the run ends, passed or failed).
step_took() {
    if [[ -n $step_started ]]; then
        printf '==> took %d s: %s\n' "$((SECONDS - step_started))" "$current_step"
    fi
}

# The last line of a run whose every step passed.
all_passed() {
    step_took
    step_started=
    printf '\n==> all checks passed\n'
}

# The output of the steps that run tests, kept to list their skips at the end.
test_log=$(mktemp)

# Runs a command, its output (stdout and stderr) also kept in $test_log.
logged() {
    "$@" 2>&1 | tee -a "$test_log"
}

# What $test_log says did not run: libtest's `test NAME ... ignored[, reason]`,
# the e2e tests' `SKIPPED: test: reason` (tests/e2e/src/skip.rs; it may
# follow libtest's `test NAME ... ` on the same line when tests run one at
# a time) and the boot test's `SKIPPED: boot test: ...`, the conformance
# runner's `SKIP subtest (reason)`, and the GDBus script's `skip binary: ...`
# and `SKIP binary: ok N /subtest # SKIP reason`.
report() {
    local status=$? skips
    step_took
    skips=$(grep -oE '^test .* \.\.\. ignored.*|SKIPPED: .*|^SKIP .*|^skip .*' "$test_log" || true)
    rm -f "$test_log"
    local scope=""
    if ((status != 0)); then
        scope=" in the steps that ran"
    fi
    if [[ -n $skips ]]; then
        printf '\n==> did not run%s (%s lines):\n' "$scope" "$(wc -l <<<"$skips")"
        printf '%s\n' "$skips"
    else
        printf '\n==> nothing was skipped or ignored%s\n' "$scope"
    fi
    # The last line: a failure is never followed by a line that reads as
    # a clean run.
    if ((status != 0)); then
        printf '\n==> FAILED at step "%s" (exit status %s); the steps after it did not run\n' \
            "$current_step" "$status"
    fi
    return "$status"
}
trap report EXIT
