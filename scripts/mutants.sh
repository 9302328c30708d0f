#!/usr/bin/env bash
# Safety mutants: deliberate bugs that the scenario suite must catch (docs/testing.md, "Safety mutants").
#
# Each testdata/mutants/NN-name.patch is a unified diff against the repository that breaks one safety property
# (terminate before drain, skip the surge, never complete a lifecycle action, ignore the pause, ...). For each
# one this script applies the patch to ONE scratch copy of the working tree, builds, runs the scenario suite and
# requires it to FAIL; then it reverts the copy for the next patch (so the Go build cache recompiles only what a
# patch touches). A patch that does not apply, or a mutant that does not compile, fails the run: it is not a
# kill. testdata/mutants/00-null.patch changes nothing that runs and must SURVIVE (the suite is not failing for
# an unrelated reason). For every kill the test and the invariant that caught it are printed.
#
# Kill-first hints: a patch may carry header lines `# kill-first: <package> -run '<regexp>'` beside `# why:`
# (before its diff; <package> one of the suite's, spelled as in `suite` below), naming the tests expected to
# catch it. They are run first, in order; the first that fails
# kills the mutant (its verdict is a real test failure, the same as the suite's). When every hint passes (a
# stale hint), the whole scenario suite runs as without hints, so a hint can only cost time, never change a
# verdict. A hint that is not of that form fails the run. 00-null carries none: it always runs the whole suite.
#
# Usage: [MUTANTS_JOBS=N] scripts/mutants.sh [pattern...]   (patterns: run only the patches whose file name
# contains one of them; MUTANTS_JOBS: shards run side by side, default 2)
# Exit: 0 when every mutant is killed and the null mutant survives; 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
patterns=("$@")
# The scenario suite: the packages whose tests drive the agent against the simulated account and judge it with
# the invariant checker. Run in this order; the first failing package kills the mutant, and within a package the
# first failing test (-failfast: the rest cannot change the verdict, and 40 mutants must fit CI's time).
suite=(./internal/agent/ ./internal/lifecycle/ ./internal/demo/ ./internal/events/ ./internal/state/ ./internal/eksupgrade/)

# Shards: MUTANTS_JOBS (default 2) copies of this script run side by side, each on every n-th matching patch in
# its own scratch copy (the Go build cache is shared and safe for concurrent use), so the verdicts are those of
# one run; the lines are printed sorted once all have finished. MUTANTS_JOBS=1 runs one after another, printing
# as it goes. Two jobs keep 75 mutants well inside CI's 90 minutes on a 2-core machine.
jobs=${MUTANTS_JOBS:-2}
if [ -z "${MUTANTS_SHARD:-}" ] && [ "$jobs" -gt 1 ]; then
  echo "running the mutants in $jobs shards; their lines come when all have finished" >&2
  outs=() pids=()
  for ((i = 0; i < jobs; i++)); do
    out=$(mktemp "${TMPDIR:-/tmp}/patch-agent-mutants-shard.XXXXXX"); outs+=("$out")
    MUTANTS_SHARD="$i/$jobs" "$0" "$@" >"$out" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  printf '%-34s %-9s %s\n' MUTANT RESULT "CAUGHT BY"
  grep -hv '^MUTANT ' "${outs[@]}" | sort || true
  rm -f "${outs[@]}"
  exit $rc
fi
if [ -n "${MUTANTS_SHARD:-}" ]; then shard=${MUTANTS_SHARD%/*} shards=${MUTANTS_SHARD#*/}; else shard=0 shards=1; fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/patch-agent-mutants.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# The working tree as it is (tracked and untracked, not ignored), as one git repository so each patch can be
# reverted exactly.
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "$scratch" 2>/dev/null || true
(cd "$scratch" && git init -q && git add -A && git -c user.email=m@l -c user.name=mutants commit -qm base)

fail=0
printf '%-34s %-9s %s\n' MUTANT RESULT "CAUGHT BY"
for patch in testdata/mutants/*.patch; do
  name=$(basename "$patch" .patch)
  if [ ${#patterns[@]} -gt 0 ]; then
    m=0; for p in "${patterns[@]}"; do [[ "$name" == *"$p"* ]] && m=1; done
    [ $m = 1 ] || continue
  fi
  k=$((${k:-0} + 1))
  [ $(((k - 1) % shards)) = "$shard" ] || continue
  (cd "$scratch" && git checkout -q -- . && git clean -qfd)
  if ! (cd "$scratch" && git apply "$root/$patch") 2>"$scratch/.apply.err"; then
    printf '%-34s %-9s %s\n' "$name" "NO-APPLY" "$(head -1 "$scratch/.apply.err")"
    fail=1; continue
  fi
  if ! (cd "$scratch" && go build ./...) >"$scratch/.build.log" 2>&1; then
    printf '%-34s %-9s %s\n' "$name" "NO-BUILD" "$(grep -m1 -v '^#' "$scratch/.build.log")"
    fail=1; continue
  fi
  killed="" caught="" hinted=""
  # A hint line: `# kill-first: ./internal/pkg/ -run 'TestA|TestB'` (no other form: a typo fails the run).
  bad=0
  while IFS= read -r hint; do
    re="^# kill-first: (\./[A-Za-z0-9_/.-]+) -run '([^']+)'$"
    if [[ ! "$hint" =~ $re ]]; then
      printf '%-34s %-9s %s\n' "$name" "BAD-HINT" "$hint"; bad=1; break
    fi
    hpkg=${BASH_REMATCH[1]} hrun=${BASH_REMATCH[2]}
    if [[ " ${suite[*]} " != *" $hpkg "* ]]; then # a kill counts only from the scenario suite
      printf '%-34s %-9s %s\n' "$name" "BAD-HINT" "$hpkg is not a package of the scenario suite"; bad=1; break
    fi
    if ! (cd "$scratch" && go test -count=1 -failfast -timeout 10m -run "$hrun" "$hpkg") >"$scratch/.test.log" 2>&1; then
      killed=$hpkg hinted=" (kill-first)"
      break
    fi
  done < <(sed -n '/^diff /q; /^# kill-first:/p' "$patch")
  if [ $bad = 1 ]; then fail=1; continue; fi
  if [ -z "$killed" ]; then
    for pkg in "${suite[@]}"; do
      if ! (cd "$scratch" && go test -count=1 -failfast -timeout 10m "$pkg") >"$scratch/.test.log" 2>&1; then
        killed=$pkg
        break
      fi
    done
  fi
  if [ -n "$killed" ]; then
    tests=$(grep -oE '^\s*--- FAIL: [^ ]+' "$scratch/.test.log" | awk '{print $3}' | sort -u | head -4 | paste -sd, - || true)
    inv=$(grep -oE 'invariant [0-9]+' "$scratch/.test.log" | sort | uniq -c | sort -rn | head -3 | awk '{print $2" "$3}' | paste -sd, - || true)
    caught="${killed}${hinted} ${tests:-(build or panic)}${inv:+ [$inv]}"
  fi
  if [ "$name" = "00-null" ]; then
    if [ -n "$killed" ]; then printf '%-34s %-9s %s\n' "$name" "KILLED" "the null mutant must survive: $caught"; fail=1
    else printf '%-34s %-9s %s\n' "$name" "survived" "(expected: it changes nothing)"; fi
  elif [ -n "$killed" ]; then
    printf '%-34s %-9s %s\n' "$name" "killed" "$caught"
  else
    printf '%-34s %-9s %s\n' "$name" "SURVIVED" "no test caught it: $(sed -n 's/^# why: //p' "$patch" | head -1)"
    fail=1
  fi
done
exit $fail
