package demo

import (
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
)

// Options configure a demo run.
type Options struct {
	// Out receives the live progress lines (nil: none).
	Out io.Writer
	// Log receives the agent's JSON logs (nil: discarded).
	Log *zap.Logger
	// Tick is the simulated time between two agent iterations. Default 5 s.
	Tick time.Duration
	// Deadline bounds the simulated duration. Default 3 h.
	Deadline time.Duration
	// Scenario names the demo scenario (Scenarios lists them); "" is "rollout".
	Scenario string
	// Store, when set, is the agent's store (so the caller can save it after the run); nil: a new one.
	Store *state.Memory
	// Timeline records Summary.Timeline, one sample per group and agent iteration (WriteTimelineSVG).
	Timeline bool
}

// Run plays a demo scenario (opts.Scenario, default "rollout"): the fleet settles on ImageA, the parameter
// changes to ImageB, and the agent rolls the group under the scenario's conditions. It returns the summary;
// an error only when the demo itself could not run.
func Run(ctx context.Context, opts Options) (testworld.Summary, error) {
	if opts.Tick <= 0 {
		opts.Tick = 5 * time.Second
	}
	if opts.Deadline <= 0 {
		opts.Deadline = 3 * time.Hour
	}
	sc, err := lookupScenario(opts.Scenario)
	if err != nil {
		return testworld.Summary{}, err
	}
	spec := testworld.DemoSpec()
	spec.Log = opts.Log
	if opts.Store != nil { // a nil *state.Memory must not become a non-nil state.Store
		spec.Store = opts.Store
	}
	if sc.setup != nil {
		sc.setup(&spec)
	}
	reg := metrics.NewRegistry(nil)
	spec.Observer = reg
	w, err := testworld.Build(spec)
	if err != nil {
		return testworld.Summary{}, err
	}
	reg.Clock = w.Account.Clock()
	reg.Consumer = w.MessageStats
	var fuse *testworld.Fuse
	if sc.crash {
		fuse = crashEveryWrite()
		w.Restart(fuse)
		w.Restarts = 0
	}
	start := w.Account.Clock().Now()
	p := newPrinter(opts.Out, w, start)
	p.record = opts.Timeline
	p.linef("scenario %s: %s", sc.name, sc.description)
	hooks := "the agent's launching and terminating lifecycle hooks"
	p.linef("simulated account: ECS cluster %q, group %s (3 instances on %s, %s), service web (6 tasks) + daemon log-router", testworld.Cluster, testworld.GroupName, testworld.ImageA, hooks)
	if w.Kube != nil {
		p.linef("simulated account: EKS cluster %q (Kubernetes %s), self-managed group %s (3 nodes on %s, AMI source auto = %s, %s), Deployment web (6 pods, PodDisruptionBudget minAvailable 5) + DaemonSet node-agent",
			testworld.EKSCluster, testworld.EKSVersion, testworld.EKSGroupName, testworld.ImageA, w.EKSParameter(testworld.EKSGroupName), hooks)
	}
	provider := ""
	for _, g := range spec.Groups {
		if g.Name == testworld.GroupName && g.CapacityProvider != nil && g.CapacityProvider.ManagedScaling {
			provider = g.CapacityProvider.Name
		}
	}
	if line := zoneLine(w, testworld.GroupName, provider); line != "" {
		p.linef("%s", line)
	}
	if sc.prepare != nil {
		sc.prepare(w)
	}
	// iterate runs one agent iteration (restarting a crashed agent), checks the invariants and moves time.
	iterate := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// One message at a time (the agent handles up to 4 at once): the order of the simulated account's
		// calls, hence its instance ids and the printed text, is then the same from run to run.
		w.Agent.Consumer.Concurrency = 1
		if err := w.Agent.RunOnce(ctx); err != nil && (fuse == nil || !fuse.Blown()) {
			return err
		}
		if fuse != nil && fuse.Blown() {
			fuse = crashEveryWrite()
			w.Restart(fuse)
			p.linef("agent killed right after a step transition; a fresh agent resumes from the store (restart %d)", w.Restarts)
		}
		w.Checker.Check()
		// What the agent just did is printed at the time it did it, before the operator's actions of the same
		// moment (a pause seen after a drain began must not read as if it came first).
		p.progress(ctx)
		if sc.during != nil {
			if err := sc.during(ctx, w, p); err != nil {
				return err
			}
		}
		w.Account.Advance(opts.Tick)
		if err := w.SyncKube(ctx); err != nil {
			return err
		}
		w.Checker.Check()
		return nil
	}
	for range 3 {
		if err := iterate(); err != nil {
			return testworld.Summary{}, err
		}
	}
	p.linef("golden-AMI parameter %s now names %s; Parameter Store Change event sent to the queue", testworld.Parameter, testworld.ImageB)
	w.PublishAMI(testworld.Parameter, testworld.ImageB)
	if param := w.EKSParameter(testworld.EKSGroupName); param != "" {
		p.linef("public parameter %s now names %s; the scheduled rule's tick sent to the queue (public parameters send no events)", param, testworld.ImageB)
		w.PublishPublicAMI(param, testworld.ImageB)
	}
	stop := sc.stop
	if stop == nil {
		stop = func(r state.Rollout, _ *testworld.World) bool {
			return r.TargetImageID == testworld.ImageB && !r.Active()
		}
	}
	for w.Account.Clock().Since(start) < opts.Deadline {
		// The world's changes since the last iteration (an instance that began to serve) are printed with the
		// next iteration's record, at the same simulated time: one line per group and moment.
		if err := iterate(); err != nil {
			return testworld.Summary{}, err
		}
		if w.AllStopped(ctx, stop) {
			break
		}
	}
	// Let the last lifecycle actions and messages settle (the crash scenario no longer kills the agent).
	if fuse != nil {
		w.ReplaceAgent(nil) // an unfused agent, not a crash: not counted as a restart
	}
	w.Agent.Consumer.Concurrency = 1
	for range 24 {
		if err := w.Step(ctx, opts.Tick); err != nil {
			return testworld.Summary{}, err
		}
	}
	p.progress(ctx)
	if line := zoneLine(w, testworld.GroupName, provider); line != "" {
		p.linef("%s", line)
	}
	w.Checker.Finish()
	s := w.Summarize(ctx, start)
	s.Scenario, s.Expected = sc.name, string(sc.expect)
	pub := &metrics.Publisher{API: w.Account.CloudWatch(), Registry: reg}
	if err := pub.Publish(ctx); err != nil {
		return testworld.Summary{}, fmt.Errorf("publishing the demo's metrics: %w", err)
	}
	s.Metrics = pub.Snapshot()
	s.Timeline = p.timeline
	p.table(s)
	return s, nil
}

// printer writes one line per rollout step change.
type printer struct {
	out   io.Writer
	w     *testworld.World
	start time.Time
	last  map[string]string // last progress line per group
	// pause scenario bookkeeping
	paused   bool
	pausedAt time.Time
	// alarm-gate scenario bookkeeping (gates.go)
	alarmCleared bool
	// record keeps timeline samples (Options.Timeline).
	record   bool
	timeline []testworld.TimelineSample
}

func newPrinter(out io.Writer, w *testworld.World, start time.Time) *printer {
	return &printer{out: out, w: w, start: start}
}

// linef writes a line of the narrative, stamped with the simulated time since the start, wrapped at lineWidth.
func (p *printer) linef(format string, args ...any) { p.stamped(fmt.Sprintf(format, args...), "") }

// stamped writes text stamped with the simulated time since the start, wrapped at lineWidth (writeWrapped:
// breakAt starts its own line when the text does not fit on one).
func (p *printer) stamped(text, breakAt string) {
	if p.out == nil {
		return
	}
	el := p.w.Account.Clock().Since(p.start).Round(time.Second)
	writeWrapped(p.out, fmt.Sprintf("[+%8s] ", el), text, breakAt)
}

func (p *printer) progress(ctx context.Context) {
	names := make([]string, 0, len(p.w.Checker.Baseline))
	for n := range p.w.Checker.Baseline {
		names = append(names, n)
	}
	sort.Strings(names)
	var nodes map[string]kubesim.NodeObservation
	if p.w.Kube != nil && (p.out != nil || p.record) {
		nodes, _ = p.w.Kube.Observe(ctx)
	}
	for _, name := range names {
		p.groupProgress(ctx, name, nodes)
	}
}

// groupProgress prints one group's line when it changed.
func (p *printer) groupProgress(ctx context.Context, group string, nodes map[string]kubesim.NodeObservation) {
	if p.out == nil && !p.record {
		return
	}
	r, err := p.w.Store.GetRollout(ctx, group)
	if err != nil {
		return
	}
	g := p.w.Account.Group(group)
	shown, _, _ := r.StatusImages() // on-target counts the AMI status shows: a rollback's, the one it goes to
	serving, onTarget, draining := 0, 0, 0
	for _, i := range g.Instances {
		if p.w.Checker.EKS[group] {
			if n, ok := nodes[i.ID]; ok && i.LifecycleState == "InService" && n.Ready && !n.Cordoned {
				serving++
			} else if ok && n.Cordoned {
				draining++
			}
		} else if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected {
			serving++
		} else if i.ContainerInstanceStatus == "DRAINING" {
			draining++
		}
		if i.LifecycleState == "InService" && i.ImageID == shown {
			onTarget++
		}
	}
	line := progressLine(group, r, g.Desired, g.Max, serving, onTarget)
	if p.record {
		p.timeline = append(p.timeline, testworld.TimelineSample{At: p.w.Account.Clock().Since(p.start), Group: group, Desired: int(g.Desired),
			Serving: serving, OnTarget: onTarget, Draining: draining, Gate: gateOf(r)})
	}
	if p.out == nil {
		return
	}
	if p.last == nil {
		p.last = map[string]string{}
	}
	if key := changeKey(line); key != p.last[group] {
		p.last[group] = key
		p.stamped(line, " reason=") // the reason goes below the counts when the line does not fit
	}
}

// progressLine is a group's progress line: where its rollout stands, in the words of the state package's
// vocabulary (Position.String: "Replacing/ReplacementHealthy"), then counts a reader can check against each
// other: instances serving, desired capacity, maximum size and instances in service on the target AMI out of
// desired capacity; then the replacement in flight and the reason. The position and the counts come first, so
// that they stay on the first line when the line is wrapped.
func progressLine(group string, r state.Rollout, desired, maxSize int32, serving, onTarget int) string {
	pos := r.Phase.String()
	detail := ""
	if c := r.Current; c != nil {
		pos += "/" + c.Step.String()
		if c.OldInstanceID != "" { // an instance refresh picks the old instances itself
			detail += " old=" + c.OldInstanceID
		}
	}
	line := fmt.Sprintf("%-14s %-28s serving=%d desired=%d max=%d on-target=%d/%d%s", group, pos,
		serving, desired, maxSize, onTarget, desired, detail)
	if r.Reason != "" {
		line += " reason=" + r.Reason
	}
	return line
}

// durationWords are the running times a reason carries ("is 12m0s old", "InProgress for 5m45s"): they change
// at every look while nothing else does.
var durationWords = regexp.MustCompile(`\b\d+(\.\d+)?(h|m|s|ms)(\d+(\.\d+)?(h|m|s|ms))*\b`)

// changeKey is what a progress line must change in to be printed again: the line without the running times
// of its reason, so that a gate that holds prints one line, not one a minute.
func changeKey(line string) string { return durationWords.ReplaceAllString(line, "#") }

func (p *printer) table(s testworld.Summary) {
	if p.out == nil {
		return
	}
	fmt.Fprintln(p.out)
	fmt.Fprintf(p.out, "%-14s %-8s %-22s %-8s %-10s %-9s %-12s %s\n", "GROUP", "PLATFORM", "TARGET AMI", "DESIRED", "ON TARGET", "MIN SERV", "PHASE", "TRANSITIONS")
	for _, g := range s.Groups {
		fmt.Fprintf(p.out, "%-14s %-8s %-22s %-8d %-10s %-9d %-12s %d\n", g.Name, g.Platform, g.StatusImageID, g.Desired,
			fmt.Sprintf("%d/%d", g.OnStatusImage, g.Desired), g.MinInServiceDuringRollout, g.State, g.Steps)
	}
	fmt.Fprintf(p.out, "\ninvariant violations: %d", s.InvariantViolations)
	if len(s.Violations) > 0 {
		fmt.Fprintf(p.out, "\n  %s", strings.Join(s.Violations, "\n  "))
	}
	fmt.Fprintf(p.out, "\nmessages: %d processed, %d ignored, %d failed; simulated time %s\n", s.Messages.Processed, s.Messages.Ignored,
		s.Messages.Failed, time.Duration(s.SimulatedSeconds*float64(time.Second)).Round(time.Second))
	for _, l := range explainCounts(s) {
		writeWrapped(p.out, "  ", l, "")
	}
}

// zoneLine says, for a group that is the ECS capacity provider provider (managed scaling), its in-service
// instances per Availability Zone and the service's tasks: what the capacity-provider scenario claims to keep.
// "" without a provider.
func zoneLine(w *testworld.World, group, provider string) string {
	if provider == "" {
		return ""
	}
	g := w.Account.Group(group)
	perAZ := map[string]int{}
	for _, i := range g.Instances {
		if i.LifecycleState == "InService" {
			perAZ[i.AvailabilityZone]++
		}
	}
	zones := slices.Sorted(maps.Keys(perAZ))
	parts := make([]string, 0, len(zones))
	n := 0
	for _, z := range zones {
		parts = append(parts, fmt.Sprintf("%s %d", z, perAZ[z]))
		n += perAZ[z]
	}
	return fmt.Sprintf("zones: %s, capacity provider %s (managed scaling, managed termination protection): %d instance(s) in %d zone(s): %s; "+
		"service web: %d tasks RUNNING, Availability Zone rebalancing on", group, provider, n, len(zones), strings.Join(parts, ", "),
		w.Account.ServiceTasks(testworld.Cluster, "web"))
}

// explainCounts says what the summary's restarts, ignored and failed messages mean, one line each that is
// not zero: a count without its meaning reads as a problem at 3 a.m.
func explainCounts(s testworld.Summary) []string {
	var out []string
	if s.Restarts > 0 {
		out = append(out, fmt.Sprintf("restarts: the agent was killed %d time(s) right after a step transition; each fresh agent resumed from the store", s.Restarts))
	}
	if s.Messages.Ignored > 0 {
		out = append(out, "ignored: messages that need no action (the lifecycle hooks' test notifications, events of groups the agent does not manage); deleted")
	}
	if s.Messages.Failed > 0 {
		why := "its handling returned an error"
		if s.Restarts > 0 {
			why = "its handling was cut short by a simulated crash"
		}
		out = append(out, "failed: "+why+"; such a message is not deleted, so SQS delivered it again and it was handled then (nothing lost)")
	}
	return out
}
