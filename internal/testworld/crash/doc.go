// Package crash runs a scenario once per effect the agent writes, crashing the agent at that effect (after
// it, or with the response lost) and restarting it from its records (RunCrashScenario), and reports the
// invariants broken and the effects repeated (RepeatedEffects): a crash at any moment must neither break an
// invariant nor make an effect twice.
package crash
