#!/usr/bin/env bash
# Runs one step of the build and prints its wall time: `scripts/timed.sh LABEL command [args...]`.
#   [step] LABEL: started 01:02:03 UTC, load 0.42 0.30 0.25
#   [step] LABEL: 123 s, exit 0
# With STEP_TIMES set to a file, it also appends "LABEL<TAB>seconds<TAB>exit" there, for .ci/run's summary.
# The command's exit status is this script's.
set -uo pipefail
label=$1; shift
read -r l1 l5 l15 _ </proc/loadavg 2>/dev/null || l1=? l5=? l15=?
echo "[step] $label: started $(date -u +%H:%M:%S) UTC, load $l1 $l5 $l15"
start=$(date +%s)
"$@"
rc=$?
secs=$(($(date +%s) - start))
echo "[step] $label: $secs s, exit $rc"
if [ -n "${STEP_TIMES:-}" ]; then printf '%s\t%s\t%s\n' "$label" "$secs" "$rc" >>"$STEP_TIMES"; fi
exit $rc
