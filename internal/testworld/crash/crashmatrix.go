package crash

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// CrashScenario is one scenario of a crash matrix, played in-process on the fake clock: a world, a driver that
// runs it to its end, and what must hold at the end.
type CrashScenario struct {
	// Name names the scenario in errors.
	Name string
	// Build returns a fresh world (a new account, store and queue) for each run.
	Build func() (*testworld.World, error)
	// Drive runs the world to the scenario's end through World.Step or World.RunUntil (which replace a crashed
	// incarnation by a fresh one on the same store, queue and account). An error ends the run.
	Drive func(w *testworld.World) error
	// Final, when set, judges the world at the end (the rollout completed, every instance on the target AMI,
	// ...). An error fails the run.
	Final func(w *testworld.World) error
	// Concurrent has the incarnations handle messages several at once, as in production (Fuse.Concurrent).
	// The order of a run's effects then varies from run to run: effect k is whichever comes k-th in that run,
	// and a run with fewer effects than k is not crashed (CrashRun.Fired).
	Concurrent bool
}

// CrashMode is how the incarnation dies at its chosen effect.
type CrashMode int

const (
	// CrashAfterEffect kills the incarnation right after effect k succeeded: the effect is durable and the
	// incarnation saw its answer, but it can do nothing after it.
	CrashAfterEffect CrashMode = iota
	// CrashResponseLost applies effect k, gives the incarnation an error instead of its answer
	// (ErrResponseLost: the request was served, the connection dropped), then kills it.
	CrashResponseLost
)

func (m CrashMode) String() string {
	if m == CrashResponseLost {
		return "response lost, then crash"
	}
	return "crash after"
}

// CrashModes are both modes, in the order the matrices run them.
var CrashModes = []CrashMode{CrashAfterEffect, CrashResponseLost}

// CrashRun is the outcome of one run of a CrashScenario.
type CrashRun struct {
	// At is the effect the incarnation died at (0: the uncrashed reference run), Mode how.
	At   int
	Mode CrashMode
	// Effects counts the effects of the first (fused) incarnation: the scenario's N in the reference run.
	Effects int
	// Restarts counts the incarnations replaced after a crash.
	Restarts int
	// Fired reports whether the incarnation died at effect At: always, unless the scenario is Concurrent and
	// the run made fewer effects.
	Fired bool
	World *testworld.World
}

// RunCrashScenario plays sc once with the first agent incarnation armed to die at effect at (0: never) in
// mode, a fresh incarnation resuming on the same store, queue and account. It returns an error when the run
// did not complete (Drive's error), the fuse did not fire, an invariant broke (Checker.Check during the run,
// Checker.Finish at its end), Final failed, or an effect was repeated (RepeatedEffects).
func RunCrashScenario(sc CrashScenario, at int, mode CrashMode) (CrashRun, error) {
	run := CrashRun{At: at, Mode: mode}
	w, err := sc.Build()
	if err != nil {
		return run, fmt.Errorf("%s: building the world: %w", sc.Name, err)
	}
	run.World = w
	baseline := make(map[string]int32, len(w.Checker.Baseline))
	for g, b := range w.Checker.Baseline {
		baseline[g] = b
	}
	fuse := &testworld.Fuse{At: at, LoseResponse: mode == CrashResponseLost, Concurrent: sc.Concurrent}
	w.ReplaceAgent(fuse) // the first incarnation: not a restart
	label := fmt.Sprintf("%s, %s effect %d", sc.Name, mode, at)
	if at == 0 {
		label = sc.Name + ", uncrashed"
	}
	if err := sc.Drive(w); err != nil {
		return run, fmt.Errorf("%s: %w", label, err)
	}
	run.Effects, run.Restarts, run.Fired = fuse.Effects(), w.Restarts, fuse.Blown()
	var problems []string
	if at > 0 && !fuse.Blown() && !sc.Concurrent {
		problems = append(problems, fmt.Sprintf("the fuse never fired (%d effects)", fuse.Effects()))
	}
	for _, v := range w.Checker.Violations {
		problems = append(problems, "during the run: "+v.String())
	}
	for _, v := range w.Checker.Finish() {
		problems = append(problems, "at the end: "+v.String())
	}
	if sc.Final != nil {
		if err := sc.Final(w); err != nil {
			problems = append(problems, err.Error())
		}
	}
	problems = append(problems, RepeatedEffects(w, baseline)...)
	if len(problems) > 0 {
		return run, fmt.Errorf("%s: %s", label, strings.Join(problems, "; "))
	}
	return run, nil
}

// CountCrashEffects plays sc uncrashed and returns its number of effects N (conditional store writes,
// mutating AWS calls and drain steps, as a Fuse counts them).
func CountCrashEffects(sc CrashScenario) (int, error) {
	run, err := RunCrashScenario(sc, 0, CrashAfterEffect)
	if err != nil {
		return 0, err
	}
	if run.Effects == 0 {
		return 0, errors.New(sc.Name + ": the scenario has no effect to crash after")
	}
	return run.Effects, nil
}

// RepeatedEffects lists the effects of the world's account that no incarnation, resumed or not, may make: the
// capacity writes the agent never makes, and the repeats of an effect made once:
//   - a write of desired capacity by the agent (sim.CallerAPI) on a managed group: a SetDesiredCapacity call, a
//     TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity, an UpdateAutoScalingGroup that
//     changes desired capacity or maximum size;
//   - a second termination of one instance (whatever its cause);
//   - a second CompleteLifecycleAction accepted for one lifecycle action token;
//   - a second launch template version with one AMI in a group's launch template;
//   - a second UpdateNodegroupVersion to one version of a managed node group (Spec.Nodegroups).
//
// The managed groups are the keys of baseline (their desired capacity when the world was built).
func RepeatedEffects(w *testworld.World, baseline map[string]int32) []string {
	var out []string
	groups := make([]string, 0, len(baseline))
	for g := range baseline {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	managed := make(map[string]bool, len(groups))
	for _, g := range groups {
		managed[g] = true
	}
	for _, c := range w.Account.CapacityWrites() {
		if c.By != sim.CallerAPI || !c.Accepted || !managed[c.Group] {
			continue
		}
		at := c.At.Format(time.TimeOnly)
		switch {
		case c.Op == sim.OpSetDesiredCapacity:
			out = append(out, fmt.Sprintf("group %s: the agent set desired capacity %d -> %d at %s", c.Group, c.From, c.To, at))
		case c.Op == sim.OpTerminateInstance && c.Decrement:
			out = append(out, fmt.Sprintf("group %s: the agent terminated %s with decrement (desired %d -> %d) at %s", c.Group, c.InstanceID, c.From, c.To, at))
		case c.Op == sim.OpUpdateAutoScalingGroup && (c.From != c.To || c.MaxFrom != c.MaxTo):
			out = append(out, fmt.Sprintf("group %s: the agent updated desired capacity %d -> %d, maximum size %d -> %d at %s", c.Group, c.From, c.To, c.MaxFrom, c.MaxTo, at))
		}
	}
	for _, g := range groups {
		view := w.Account.Group(g)
		if lt, ok := w.Account.LaunchTemplate(view.LaunchTemplateID); ok {
			versions := map[string][]int64{}
			for v, ami := range lt.ImageIDs {
				versions[ami] = append(versions[ami], v)
			}
			for ami, vs := range versions {
				if len(vs) > 1 {
					sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
					out = append(out, fmt.Sprintf("group %s: launch template %s has versions %v all on %s", g, lt.ID, vs, ami))
				}
			}
		}
	}
	terminated := map[string]int{}
	for _, t := range w.Account.Terminations() {
		terminated[t.InstanceID]++
		if terminated[t.InstanceID] == 2 {
			out = append(out, fmt.Sprintf("instance %s terminated twice (second: %s at %s)", t.InstanceID, t.Cause, t.RequestedAt.Format(time.TimeOnly)))
		}
	}
	completed := map[string]int{}
	for _, c := range w.Account.LifecycleCompletions() {
		if !c.Accepted || c.Caller == sim.CallerECS || c.Result == "" {
			continue
		}
		completed[c.Token]++
		if completed[c.Token] == 2 {
			out = append(out, fmt.Sprintf("lifecycle action %s (instance %s) completed twice", c.Token, c.InstanceID))
		}
	}
	out = append(out, repeatedNodegroupUpdates(w)...)
	return out
}

// repeatedNodegroupUpdates lists the managed node groups of the world that got a second UpdateNodegroupVersion
// to the same version (release or launch template version): a resumed incarnation must send each update of a
// rollout once (the ClientRequestToken recorded before the call makes a repeat the same update).
func repeatedNodegroupUpdates(w *testworld.World) []string {
	var out []string
	seen := map[string]int{}
	clusters := map[string]bool{}
	for _, ng := range w.Nodegroups {
		clusters[ng.Cluster] = true
	}
	names := make([]string, 0, len(clusters))
	for c := range clusters {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		for _, u := range w.Account.EKSUpdates(c) {
			if u.Nodegroup == "" {
				continue
			}
			key := fmt.Sprintf("%s/%s release %q launch template version %q", c, u.Nodegroup, u.Params["ReleaseVersion"], u.Params["LaunchTemplateVersion"])
			seen[key]++
			if seen[key] == 2 {
				out = append(out, "managed node group "+key+": UpdateNodegroupVersion sent twice (second: "+u.ID+")")
			}
		}
	}
	return out
}
