#!/usr/bin/env bash
# Safety mutants: deliberate bugs that the tests must catch (docs/testing.md, "Safety mutants").
#
# Each testdata/mutants/NN-name.mutant breaks one safety property by name, not by line: its edits name a
# package directory and a declaration (function, method, type, var or const) and the lines to change inside
# it (tools/mutate, "Mutant"). So a mutant survives code moving around, and a mutant whose function was
# renamed or whose lines are gone does not apply: NO-APPLY fails the run, it is never a pass.
#
# For each mutant this script applies it to ONE scratch copy of the working tree, runs the tests its
# `# kill:` headers name (`# kill: ./internal/pkg/ -run 'regexp'`), in order, and requires one of them to FAIL.
# When every named test passes, it falls back to the whole suite of the named packages and says so ("fallback:
# the kill header is stale"); a mutant no test catches SURVIVED and fails the run. A mutant that does not
# compile fails the run (NO-BUILD): it is not a kill. Then the copy is reverted for the next mutant (the Go build
# cache recompiles only what a mutant touches).
#
# 00-null changes nothing that runs and must SURVIVE every kill test of the mutants run beside it: a kill test
# that fails on the unmutated code would make every kill meaningless.
#
# Sets: by default the curated set (`# set: curated`: the bugs that matter for each invariant, what CI runs);
# --all runs every mutant (`make mutants-all`).
#
# Usage: [MUTANTS_JOBS=N] scripts/mutants.sh [--all] [pattern...]
#   patterns: run only the mutants whose file name contains one of them (00-null always runs)
#   MUTANTS_JOBS: shards run side by side, default 2; MUTANTS_DIR: where the mutants are (default
#   testdata/mutants); MUTATE: a built tools/mutate (default: built from this tree)
# Exit: 0 when every mutant is killed and the null mutant survives; 1 otherwise.
set -euo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)
root=${MUTANTS_ROOT:-$root}
cd "$root"
all=0 patterns=()
for a in "$@"; do
  if [ "$a" = --all ]; then all=1; else patterns+=("$a"); fi
done
dir=${MUTANTS_DIR:-testdata/mutants}

if [ -z "${MUTATE:-}" ]; then
  mutate_dir=$(mktemp -d "${TMPDIR:-/tmp}/patch-agent-mutate.XXXXXX")
  trap 'rm -rf "$mutate_dir"' EXIT
  MUTATE=$mutate_dir/mutate
  go build -o "$MUTATE" ./tools/mutate
fi
export MUTATE

# The mutants of this run: the set, then the patterns; 00-null first. A mutant file that does not parse fails
# the run here (it is neither in nor out of the set), and so does a pattern that matches no mutant of the set.
if [ ! -f "$dir/00-null.mutant" ]; then echo "mutants: $dir/00-null.mutant is missing: without it no run proves its kill tests pass on unmutated code" >&2; exit 1; fi
selected=()
matched=()
for m in "$dir"/*.mutant; do
  name=$(basename "$m" .mutant)
  if ! sets=$("$MUTATE" header "$m" set); then echo "mutants: $m does not parse" >&2; exit 1; fi
  if [ "$name" != 00-null ]; then
    if [ $all = 0 ] && ! grep -qx curated <<<"$sets"; then continue; fi
    if [ ${#patterns[@]} -gt 0 ]; then
      hit=0; for p in "${patterns[@]}"; do [[ "$name" == *"$p"* ]] && hit=1 matched+=("$p"); done
      [ $hit = 1 ] || continue
    fi
  fi
  selected+=("$m")
done
for p in "${patterns[@]}"; do
  if [[ " ${matched[*]} " != *" $p "* ]]; then
    echo "mutants: no mutant of the $([ $all = 1 ] && echo full || echo curated) set matches '$p'$([ $all = 0 ] && echo ' (--all runs every mutant)')" >&2
    exit 1
  fi
done

# Shards: MUTANTS_JOBS (default 2) copies of this script run side by side, each on every n-th selected mutant in
# its own scratch copy (the Go build cache is shared and safe for concurrent use); their lines are printed
# sorted once all have finished.
jobs=${MUTANTS_JOBS:-2}
if [ -z "${MUTANTS_SHARD:-}" ] && [ "$jobs" -gt 1 ]; then
  set_name=curated; [ $all = 1 ] && set_name=all
  echo "running ${#selected[@]} mutants (set: $set_name) in $jobs shards; their lines come when all have finished" >&2
  outs=() pids=()
  for ((i = 0; i < jobs; i++)); do
    out=$(mktemp "${TMPDIR:-/tmp}/patch-agent-mutants-shard.XXXXXX"); outs+=("$out")
    args=(); [ $all = 1 ] && args+=(--all)
    MUTANTS_SHARD="$i/$jobs" "$self" "${args[@]}" "${patterns[@]}" >"$out" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  printf '%-52s %-9s %6s  %s\n' MUTANT RESULT SECS "CAUGHT BY"
  grep -hv '^MUTANT ' "${outs[@]}" | sort || true
  rm -f "${outs[@]}"
  exit $rc
fi
if [ -n "${MUTANTS_SHARD:-}" ]; then shard=${MUTANTS_SHARD%/*} shards=${MUTANTS_SHARD#*/}; else shard=0 shards=1; fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/patch-agent-mutants.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# The working tree as it is (tracked and untracked, not ignored), as one git repository so each mutant can be
# reverted exactly.
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "$scratch" 2>/dev/null || true
(cd "$scratch" && git init -q && git add -A && git -c user.email=m@l -c user.name=mutants commit -qm base)

# go test output that says the test binary did not build: a mutant that breaks a dependent package's build.
build_failed() { grep -qE '\[build failed\]|\[setup failed\]' "$1"; }

fail=0
line() { printf '%-52s %-9s %6s  %s\n' "$1" "$2" "$3" "$4"; }
printf '%-52s %-9s %6s  %s\n' MUTANT RESULT SECS "CAUGHT BY"
k=0
for m in "${selected[@]}"; do
  name=$(basename "$m" .mutant)
  k=$((k + 1))
  [ $(((k - 1) % shards)) = "$shard" ] || continue
  start=$SECONDS
  (cd "$scratch" && git checkout -q -- . && git clean -qfd)
  if [ "$name" = 00-null ]; then
    # The null mutant runs every kill test of this run's set, one go test per package.
    kills=$(for o in "${selected[@]}"; do "$MUTATE" kills "$o"; done | sort -u)
  else
    if ! kills=$("$MUTATE" kills "$m" 2>"$scratch/.err"); then
      line "$name" BAD-HINT 0 "$(head -1 "$scratch/.err")"; fail=1; continue
    fi
    if [ -z "$kills" ]; then line "$name" BAD-HINT 0 "no # kill: header names the test expected to kill it"; fail=1; continue; fi
  fi
  if ! (cd "$scratch" && "$MUTATE" apply "$root/$m") 2>"$scratch/.err"; then
    line "$name" NO-APPLY $((SECONDS - start)) "$(head -1 "$scratch/.err")"; fail=1; continue
  fi
  pkgs=$(cut -f1 <<<"$kills" | sort -u)
  if [ "$name" = 00-null ]; then
    survived=1 broke=""
    for pkg in $pkgs; do
      re=$(awk -F'\t' -v p="$pkg" '$1 == p {print $2}' <<<"$kills" | paste -sd'|' -)
      if ! (cd "$scratch" && go test -count=1 -timeout 20m -run "$re" "$pkg") >"$scratch/.test.log" 2>&1; then
        survived=0 broke="$broke $pkg $( (grep -oE -- '--- FAIL: [^ ]+|\[build failed\]|\[setup failed\]|panic: .*' "$scratch/.test.log" || echo 'exit status non-zero') | head -3 | paste -sd, -)"
      fi
    done
    if [ $survived = 1 ]; then line "$name" survived $((SECONDS - start)) "(expected: every kill test passes on it)"
    else line "$name" KILLED $((SECONDS - start)) "the null mutant must survive; failing on unmutated code:$broke"; fail=1; fi
    continue
  fi
  killed="" how=""
  while IFS=$'\t' read -r pkg re; do
    if ! (cd "$scratch" && go test -count=1 -failfast -timeout 10m -run "$re" "$pkg") >"$scratch/.test.log" 2>&1; then
      killed=$pkg; break
    fi
  done <<<"$kills"
  if [ -z "$killed" ]; then
    for pkg in $pkgs; do
      if ! (cd "$scratch" && go test -count=1 -failfast -timeout 20m "$pkg") >"$scratch/.test.log" 2>&1; then
        killed=$pkg how=" (fallback: the named tests passed, the package suite failed: the kill header is stale)"
        break
      fi
    done
  fi
  if [ -n "$killed" ] && build_failed "$scratch/.test.log"; then
    line "$name" NO-BUILD $((SECONDS - start)) "$(grep -m1 -E '\.go:[0-9]+' "$scratch/.test.log" || echo "$killed does not build")"
    fail=1; continue
  fi
  if [ -n "$killed" ]; then
    tests=$(grep -oE -- '--- FAIL: [^ ]+' "$scratch/.test.log" | awk '{print $3}' | grep -v / | sort -u | head -4 | paste -sd, - || true)
    inv=$(grep -oE 'invariant [0-9]+' "$scratch/.test.log" | sort | uniq -c | sort -rn | head -3 | awk '{print $2" "$3}' | paste -sd, - || true)
    line "$name" killed $((SECONDS - start)) "${killed} ${tests:-(panic or timeout)}${inv:+ [$inv]}${how}"
  else
    line "$name" SURVIVED $((SECONDS - start)) "no test caught it: $("$MUTATE" header "$m" why | head -1)"
    fail=1
  fi
done
exit $fail
