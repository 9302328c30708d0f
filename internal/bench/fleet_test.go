package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// publishOnce is testworld.World.PublishAMI with an event id of its own: the world's ids are its simulated time,
// which two changes sent within one pass share (the second would be dropped as a duplicate delivery).
func publishOnce(w *testworld.World, param, image string, n int) {
	w.RegisterAMI(image)
	w.Account.PutParameter(param, image)
	now := w.Account.Clock().Now().UTC().Format(time.RFC3339)
	w.Account.SendMessage(w.QueueURL, fmt.Sprintf(`{"version":"0","id":"reaction-%d","detail-type":"Parameter Store Change","source":"aws.ssm","account":"111122223333","time":%q,"region":"us-east-1","resources":["arn:aws:ssm:us-east-1:111122223333:parameter%s"],"detail":{"operation":"Update","name":%q,"type":"String"}}`,
		n, now, param, param))
}

// stageHandler stands between the consumer and the agent in the fleet scenario to time the stages of a
// reaction (not a pass/fail test: the figures are logged): when the handling of the watched parameter's
// change began and ended, and how long the urgent lane of the client-side limiter waited meanwhile.
type stageHandler struct {
	events.Handler
	param   string
	limiter *awsapi.Limiter

	mu              sync.Mutex
	began, ended    time.Time
	urgentWaitAtBeg time.Duration
	urgentWait      time.Duration
}

// watch makes param the parameter whose change is timed next.
func (h *stageHandler) watch(param string) {
	h.mu.Lock()
	h.param = param
	h.mu.Unlock()
}

func (h *stageHandler) Handle(ctx context.Context, ev events.Event) (events.Disposition, error) {
	h.mu.Lock()
	watched := ev.Kind == events.KindParameterChange && ev.Parameter != nil && ev.Parameter.Name == h.param
	h.mu.Unlock()
	if watched {
		h.mu.Lock()
		h.began, h.urgentWaitAtBeg = time.Now(), h.limiter.Waited(true)
		h.mu.Unlock()
	}
	d, err := h.Handler.Handle(ctx, ev)
	if watched {
		h.mu.Lock()
		h.ended, h.urgentWait = time.Now(), h.limiter.Waited(true)-h.urgentWaitAtBeg
		h.mu.Unlock()
	}
	return d, err
}

// stages returns, for a change sent at sent whose group's instance refresh started at seen (refreshStarts):
// the time it waited on the queue before its handling began, the handling until the refresh started (or the
// handling's end, when it ended before), the urgent lane's limiter wait in the whole handling, and the time
// from the handling's end to the refresh's start (zero when the handling started it).
func (h *stageHandler) stages(sent, seen time.Time) (queued, handling, urgentWait, after time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.began.Before(sent) {
		return seen.Sub(sent), 0, 0, 0 // not handled within the wait
	}
	end := h.ended
	if end.Before(h.began) || seen.Before(end) {
		end = seen
	}
	return h.began.Sub(sent), end.Sub(h.began), h.urgentWait, max(seen.Sub(end), 0)
}

// fleetTrace times every call over the wire and every pass and message handling of the fleet scenario, and
// logs where the longest one spent its time (which calls, which limiter waits) and when the launch template
// versions were created and the instance refreshes started (not a pass/fail test: the figures are logged).
type fleetTrace struct {
	mu     sync.Mutex
	calls  []sim.WireCall
	passes []tracedPass
	// advances are the bench loop's own Account.Advance calls between passes (the simulated account's 15 s,
	// spent in real time under its lock): not the agent's, so not in passes or FleetMaxPassS.
	advances []tracedPass
}

func (tr *fleetTrace) advanced(start time.Time, took time.Duration) {
	tr.mu.Lock()
	tr.advances = append(tr.advances, tracedPass{"advance", start, took})
	tr.mu.Unlock()
}

type tracedPass struct {
	kind  string
	start time.Time
	took  time.Duration
}

func (tr *fleetTrace) call(c sim.WireCall) {
	tr.mu.Lock()
	tr.calls = append(tr.calls, c)
	tr.mu.Unlock()
}

func (tr *fleetTrace) pass(kind string, start time.Time, took time.Duration) {
	tr.mu.Lock()
	tr.passes = append(tr.passes, tracedPass{kind, start, took})
	tr.mu.Unlock()
}

// report logs the longest pass's calls by operation (count, limiter wait, round trips) and the last calls to
// end in it, and the launch template versions' creation times and the instance refreshes' start times from t0
// (the shared parameter's change).
func (tr *fleetTrace) report(t *testing.T, t0 time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.passes) == 0 {
		return
	}
	longest := tr.passes[0]
	for _, p := range tr.passes {
		if p.took > longest.took {
			longest = p
		}
	}
	end := longest.start.Add(longest.took)
	type opSum struct {
		n, cut      int
		wait, spent time.Duration
	}
	ops := map[string]*opSum{}
	var inside []sim.WireCall
	for _, c := range tr.calls {
		if c.Start.Before(longest.start) || c.Start.After(end) {
			continue
		}
		inside = append(inside, c)
		o := ops[c.Op]
		if o == nil {
			o = &opSum{}
			ops[c.Op] = o
		}
		o.n++
		o.wait += c.Waited
		o.spent += c.Took
		if c.Err != nil {
			o.cut++
		}
	}
	t.Logf("longest %s: %.2f s from %.2f s after the change; %d calls began in it (calls beside it from other goroutines included)",
		longest.kind, longest.took.Seconds(), longest.start.Sub(t0).Seconds(), len(inside))
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	for _, op := range names {
		o := ops[op]
		t.Logf("  %-45s %4d calls (%d failed), limiter wait %6.2f s, in all %6.2f s", op, o.n, o.cut, o.wait.Seconds(), o.spent.Seconds())
	}
	sort.Slice(inside, func(i, j int) bool {
		return inside[i].Start.Add(inside[i].Took).Before(inside[j].Start.Add(inside[j].Took))
	})
	for _, c := range inside[max(0, len(inside)-6):] {
		t.Logf("  last: %-45s urgent=%v began %.2f s, waited %.2f s, ended %.2f s into it, err=%v", c.Op, c.Urgent,
			c.Start.Sub(longest.start).Seconds(), c.Waited.Seconds(), c.Start.Add(c.Took).Sub(longest.start).Seconds(), c.Err)
	}
	for _, op := range []string{"ec2:CreateLaunchTemplateVersion", "autoscaling:StartInstanceRefresh"} {
		var answered []string
		for _, c := range tr.calls {
			if c.Op == op && c.Err == nil {
				u := ""
				if c.Urgent {
					u = "u"
				}
				answered = append(answered, fmt.Sprintf("%.2f%s", c.Start.Add(c.Took).Sub(t0).Seconds(), u))
			}
		}
		t.Logf("%s answered at (s after the change; u: urgent): %s", op[strings.Index(op, ":")+1:], strings.Join(answered, " "))
	}
	var kinds []string
	for _, p := range tr.passes {
		if p.took > time.Second {
			kinds = append(kinds, fmt.Sprintf("%s@%.1f=%.2f", p.kind, p.start.Sub(t0).Seconds(), p.took.Seconds()))
		}
	}
	t.Logf("passes and handlings over 1 s (kind@start=took, s): %s", strings.Join(kinds, " "))
	// Where the time between passes goes: the bench's own Advance (the account settling 15 s of instances),
	// which no agent in production waits for.
	var total, longestAdvance time.Duration
	var slow []string
	for _, a := range tr.advances {
		total += a.took
		longestAdvance = max(longestAdvance, a.took)
		if a.took > time.Second {
			slow = append(slow, fmt.Sprintf("%.1f=%.2f", a.start.Sub(t0).Seconds(), a.took.Seconds()))
		}
	}
	t.Logf("the bench loop's Account.Advance between passes: %d calls, %.1f s in all, longest %.2f s; over 1 s (start=took, s): %s",
		len(tr.advances), total.Seconds(), longestAdvance.Seconds(), strings.Join(slow, " "))
}

// fleetResults are the fleet scenario's keys in bench-results.json.
type fleetResults struct {
	// FleetSize is the size run: groups x instances per group, and the per-call latency.
	FleetSize string `json:"fleet_size"`
	// FleetThrottles counts the calls the simulated account's token buckets refused (goal 0).
	FleetThrottles int `json:"fleet_throttles"`
	// FleetMaxPassS is the longest reconcile pass or message handling, in seconds of real time (goal <= 10).
	FleetMaxPassS float64 `json:"fleet_max_pass_s"`
	// FleetReactionP99Ms: a golden-AMI parameter change of one other (Idle) group, sent while the fleet's
	// rollouts run, until Auto Scaling accepted that group's instance refresh to its new launch template
	// version (StartInstanceRefresh answered), real milliseconds (goal <= 1000).
	FleetReactionP99Ms float64 `json:"fleet_reaction_p99_ms"`
	// FleetVersionsS is how long, in real seconds, the agent took after the shared parameter changed until
	// every fleet group's instance refresh to its new launch template version started (its version created,
	// then StartInstanceRefresh answered); FleetBudgetS the least time the agent's EC2 mutating-call budget
	// allows for the versions' creation; FleetVersionsBudgetRatio the first over the second (goal <= 1.2).
	FleetVersionsS           float64 `json:"fleet_versions_s"`
	FleetBudgetS             float64 `json:"fleet_budget_s"`
	FleetVersionsBudgetRatio float64 `json:"fleet_versions_budget_ratio"`
	// FleetGroups is the fleet's group count; FleetGroupsOnNewVersion how many had their instance refresh to
	// their new launch template version started when the wait ended (every one, or none started for
	// fleetStall, or the wait reached its cap).
	FleetGroups             int `json:"fleet_groups"`
	FleetGroupsOnNewVersion int `json:"fleet_groups_on_new_version"`
	// FleetReactionCapped: some other group's refresh did not start within fleetWaitCap (the reaction
	// figures are then lower bounds).
	FleetReactionCapped bool `json:"fleet_reaction_capped"`
	// AgentHeapMiB1000Groups is the in-use heap attributed to the agent's packages at 1,000 groups x 20
	// instances (goal <= 40).
	AgentHeapMiB1000Groups float64 `json:"agent_heap_mib_1000_groups"`
}

// fleetSetting is PATCH_AGENT_FLEET as the run had it ("20x5" when unset), for the report's header.
func fleetSetting() string {
	if v := os.Getenv("PATCH_AGENT_FLEET"); v != "" {
		return v
	}
	return "20x5"
}

// fleetSize reads PATCH_AGENT_FLEET ("1000x20", which `make bench` sets unless told otherwise); default
// 20 x 5 for a quick run of this test alone.
func fleetSize(t *testing.T) (groups, instances int) {
	groups, instances = 20, 5
	if v := os.Getenv("PATCH_AGENT_FLEET"); v != "" {
		g, n, ok := strings.Cut(v, "x")
		var err1, err2 error
		groups, err1 = strconv.Atoi(g)
		instances, err2 = strconv.Atoi(n)
		require.True(t, ok && err1 == nil && err2 == nil && groups > 0 && instances > 0, "PATCH_AGENT_FLEET=%q: want GROUPSxINSTANCES such as 1000x20", v)
	}
	return groups, instances
}

const (
	fleetLatency   = 40 * time.Millisecond
	fleetParameter = "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"
	fleetReactions = 5
	// fleetWaitCap bounds each wait of the scenario; a wait that reaches it is recorded at the cap (the
	// report then says ">=").
	fleetWaitCap = 90 * time.Second
	// fleetStall ends the wait for every group's instance refresh when none started for that long.
	fleetStall = 2 * time.Minute
)

// fleetScenario runs groups x instances ECS groups on one public parameter, each with the agent's launching and
// terminating hooks (max one above desired: room for the refresh's batch), against the simulated account
// behind the wire: every call 40 ms of real time, the account's documented token buckets, the agent's
// default client-side limits and workers. The agent is driven as Run drives it, in real time: one goroutine
// polls the queue (the parameter changes and the groups' lifecycle actions), another runs passes, each pass
// advancing the simulated clock by the production 15 s. The public parameter changes once (the schedule
// rule's event) and the wait is for every group's instance refresh to its new launch template version to
// start (refreshStarts); then, while the refreshes run, the golden-AMI parameters of fleetReactions other
// groups change, one change at a time, each until its group's refresh started (stageHandler times each
// stage).
func fleetScenario(t *testing.T, groups, instances int) fleetResults {
	ctx := context.Background()
	limits := awsapi.DefaultRateLimits()
	// The EC2 mutating budget binds only past its burst: scaled to the fleet (100 at 1,000 groups) so that
	// a small run measures the same thing.
	limits[awsapi.RateEC2Mutating] = awsapi.RateLimit{Rate: limits[awsapi.RateEC2Mutating].Rate, Burst: max(1, min(100, groups/10))}
	faults := sim.NewFaults(1, nil)
	limiter := awsapi.NewLimiter(limits)
	tr := &fleetTrace{}
	faults.Pause(true) // no injected faults: only the wire, put in place once the fleet is set up
	// The pass budget in real time: the passes run on the simulated clock, which stands still inside a pass.
	starts := newRefreshStarts()
	spec := testworld.Spec{Faults: faults, Workers: agent.DefaultWorkers, Log: zap.NewNop(), PassClock: clock.RealClock{}, Wrap: starts.wrap}
	for i := range groups {
		spec.Groups = append(spec.Groups, testworld.GroupSetup{Name: fmt.Sprintf("fleet-%04d", i), Cluster: fmt.Sprintf("c-%03d", i/10),
			Parameter: fleetParameter, Min: int32(instances), Max: int32(instances + 1), Desired: int32(instances)})
	}
	// The other groups, one per reaction, each on its own golden-AMI parameter: each change finds its group
	// Idle, so it measures the reaction, not the replacement a previous change started (a newer AMI
	// supersedes a rollout only between two replacements).
	var others []testworld.GroupSetup
	for i := range fleetReactions {
		others = append(others, testworld.GroupSetup{Name: fmt.Sprintf("other-%d", i), Cluster: fmt.Sprintf("c-other-%d", i),
			Parameter: fmt.Sprintf("/golden-ami/other-%d", i), Min: 1, Max: 2, Desired: 1})
	}
	spec.Groups = append(spec.Groups, others...)
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	// The setup runs without the wire: every group seen Idle on its current AMI, and the test notifications
	// Auto Scaling sends when the hooks are created (two per group) handled, so that the measured changes do
	// not queue behind them.
	require.NoError(t, w.Agent.Reconcile(ctx))
	for {
		n, err := w.Agent.Consumer.PollOnce(ctx, 0)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	faults.SetWire(sim.Wire{Client: limiter, Account: sim.AWSAccountLimits(), Latency: fleetLatency, Trace: tr.call})
	stages := &stageHandler{Handler: w.Agent.Consumer.Handler, limiter: limiter}
	w.Agent.Consumer.Handler = stages

	var mu sync.Mutex
	var maxPass time.Duration
	took := func(kind string, start time.Time) {
		d := time.Since(start)
		tr.pass(kind, start, d)
		mu.Lock()
		maxPass = max(maxPass, d)
		mu.Unlock()
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the consumer
		defer wg.Done()
		for runCtx.Err() == nil {
			start := time.Now()
			n, _ := w.Agent.Consumer.PollOnce(runCtx, 0)
			if n > 0 {
				took("receive", start)
				continue
			}
			select { // an empty receive: SQS would have long-polled
			case <-runCtx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	go func() { // the loop's passes
		defer wg.Done()
		for runCtx.Err() == nil {
			a := time.Now()
			w.Account.Advance(15 * time.Second)
			tr.advanced(a, time.Since(a))
			start := time.Now()
			_ = w.Agent.Reconcile(runCtx)
			took("pass", start)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	start := time.Now()
	w.PublishPublicAMI(fleetParameter, testworld.ImageB)
	type versionsWait struct {
		took  time.Duration
		moved int
	}
	versionsDone := make(chan versionsWait, 1)
	lastLog, lastMoved, movedAt := time.Now(), 0, time.Now()
	go func() { // every fleet group's instance refresh started, watched beside the reactions
		for {
			moved, last := 0, start
			for _, g := range spec.Groups[:groups] {
				if at, ok := starts.startedAt(g.Name); ok {
					moved++
					if at.After(last) {
						last = at
					}
				}
			}
			if moved != lastMoved {
				lastMoved, movedAt = moved, time.Now()
			}
			// No refresh started for fleetStall: waiting on to the cap would only spend the machine.
			stalled := time.Since(movedAt) > fleetStall
			if moved == groups || stalled || time.Since(start) > 10*fleetWaitCap {
				took := last.Sub(start)
				if moved < groups {
					took = time.Since(start)
					t.Logf("only %d of %d groups' instance refreshes started after %.0f s (stalled: %v); recorded then", moved, groups, took.Seconds(), stalled)
				}
				versionsDone <- versionsWait{took, moved}
				return
			}
			if time.Since(lastLog) > time.Minute {
				t.Logf("%.0f s after the change: %d of %d groups' instance refreshes started", time.Since(start).Seconds(), moved, groups)
				lastLog = time.Now()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// The other groups' golden AMIs change, one after another, while the fleet's launch template versions are
	// being created and its refreshes run.
	var lat []float64
	capped := false
	for i, other := range others {
		image := fmt.Sprintf("ami-0%016x", 0xf1ee7000+i)
		stages.watch(other.Parameter)
		sent := time.Now()
		publishOnce(w, other.Parameter, image, i)
		seen, ok := starts.startedAt(other.Name)
		for !ok && time.Since(sent) < fleetWaitCap {
			time.Sleep(time.Millisecond)
			seen, ok = starts.startedAt(other.Name)
		}
		if !ok {
			capped, seen = true, time.Now()
		}
		lat = append(lat, float64(seen.Sub(sent).Microseconds())/1000)
		queued, handling, urgentWait, after := stages.stages(sent, seen)
		t.Logf("other group %d's change started its instance refresh in %.0f ms: queued %d ms, handling until the start %d ms (urgent-lane limiter wait in the handling %d ms), after handling %d ms",
			i, lat[len(lat)-1], queued.Milliseconds(), handling.Milliseconds(), urgentWait.Milliseconds(), after.Milliseconds())
		time.Sleep(100 * time.Millisecond)
	}
	done := <-versionsDone
	versions := done.took
	cancel()
	wg.Wait()

	sort.Float64s(lat)
	tr.report(t, start)
	st := faults.Stats()
	// One CreateLaunchTemplateVersion per group (before its refresh starts) is what the EC2 mutating bucket
	// meters; the agent's bucket lets the first Burst through at once and then Rate per second.
	b := limits[awsapi.RateEC2Mutating]
	calls := st.Successes["ec2:CreateLaunchTemplateVersion"]
	budget := math.Max(float64(calls-b.Burst)/b.Rate, 0) + fleetLatency.Seconds()
	return fleetResults{
		FleetSize:                fmt.Sprintf("%d x %d, %s per call", groups, instances, fleetLatency),
		FleetThrottles:           sim.Total(st.Throttled),
		FleetMaxPassS:            maxPass.Seconds(),
		FleetReactionP99Ms:       lat[(len(lat)*99)/100],
		FleetVersionsS:           versions.Seconds(),
		FleetBudgetS:             budget,
		FleetVersionsBudgetRatio: versions.Seconds() / budget,
		FleetGroups:              groups,
		FleetGroupsOnNewVersion:  done.moved,
		FleetReactionCapped:      capped,
	}
}

// agentHeapMiB builds 1,000 groups x 20 instances, runs three passes (zero latency) and returns the in-use
// heap that a heap profile attributes to the agent: allocations whose innermost patch-agent frame is in one
// of the agent's packages rather than in the simulated account or the demo world. What the account
// allocates and the agent keeps (SDK answers it caches) is counted as the account's, so the figure is a lower
// bound of what the agent holds.
func agentHeapMiB(t *testing.T) float64 {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 64 << 10
	defer func() { runtime.MemProfileRate = old }()
	ctx := context.Background()
	w := manyGroups(t, 1000, 20)
	for range 3 {
		require.NoError(t, w.Agent.Reconcile(ctx))
	}
	runtime.GC()
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("heap").WriteTo(&buf, 1))
	runtime.KeepAlive(w)
	return float64(agentInUse(t, buf.String())) / (1 << 20)
}

var (
	heapRecord = regexp.MustCompile(`^(\d+): (\d+) \[\d+: \d+\] @`)
	heapFrame  = regexp.MustCompile(`^#\s+0x[0-9a-f]+\s+(\S+)`)
)

// agentInUse sums the in-use bytes of the records of a text heap profile (debug=1) whose innermost
// patch-agent frame is not in internal/sim, internal/testworld, internal/demo or internal/bench.
func agentInUse(t *testing.T, profile string) int64 {
	var total, bytesNow int64
	decided, inRecord := false, false
	sc := bufio.NewScanner(strings.NewReader(profile))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := heapRecord.FindStringSubmatch(line); m != nil {
			bytesNow, _ = strconv.ParseInt(m[2], 10, 64)
			decided, inRecord = false, true
			continue
		}
		if !inRecord || decided {
			continue
		}
		if m := heapFrame.FindStringSubmatch(line); m != nil && strings.Contains(m[1], "patch-agent/patch-agent/") {
			decided = true
			fn := m[1]
			if !strings.Contains(fn, "/internal/sim.") && !strings.Contains(fn, "/internal/demo.") && !strings.Contains(fn, "/internal/testworld") && !strings.Contains(fn, "/internal/bench.") {
				total += bytesNow
			}
		}
		if line == "" {
			inRecord = false
		}
	}
	require.NoError(t, sc.Err())
	return total
}

// fleetFigures are the fleet scenario's rows of docs/performance.md.
func fleetFigures(r results) []figure {
	how := "fleet scenario (" + r.FleetSize + "; PATCH_AGENT_FLEET=GROUPSxINSTANCES): groups with the agent's launching and terminating hooks on one public parameter, which changes once; the simulated account answers " +
		"every call after 40 ms of real time behind AWS's documented token buckets, the agent runs its default client-side limits and 8 workers"
	reaction := fmt.Sprintf("%.0f ms", r.FleetReactionP99Ms)
	if r.FleetReactionCapped {
		reaction = ">= " + reaction + " (a change waited the whole cap)"
	}
	versions := fmt.Sprintf("%.2f (%.1f s / %.1f s; %d of %d groups)", r.FleetVersionsBudgetRatio, r.FleetVersionsS, r.FleetBudgetS, r.FleetGroupsOnNewVersion, r.FleetGroups)
	return []figure{
		{"fleet: throttling errors", fmt.Sprintf("%d", r.FleetThrottles), "0", verdict(r.FleetThrottles == 0), how},
		{"fleet: longest pass or message handling", fmt.Sprintf("%.2f s", r.FleetMaxPassS), "<= 10 s", verdict(r.FleetMaxPassS <= 10), "real time of each Reconcile and of each receive with messages, same run"},
		{"fleet: other group's golden-AMI change to its instance refresh's start, p99", reaction, "<= 1000 ms", verdict(r.FleetReactionP99Ms <= 1000 && !r.FleetReactionCapped),
			fmt.Sprintf("%d changes, each of another Idle group's golden-AMI parameter, sent one by one while the fleet's refreshes run, each until Auto Scaling accepted that group's StartInstanceRefresh to its new launch template version (of %d, the p99 is the largest)", fleetReactions, fleetReactions)},
		{"fleet: every group's instance refresh started / EC2 budget", versions, "<= 1.2, every group",
			verdict(r.FleetVersionsBudgetRatio <= 1.2 && r.FleetGroups > 0 && r.FleetGroupsOnNewVersion == r.FleetGroups),
			"real time until Auto Scaling accepted every group's StartInstanceRefresh to its new launch template version (or the wait ended: no refresh started for 2 min, or 15 min), over (versions - burst) / rate of the agent's ec2-mutating limit (2.5/s, burst scaled to groups/10, 100 at 1,000 groups) + one call; met only when every group's refresh started"},
		{"agent heap, 1,000 groups x 20 instances", fmt.Sprintf("%.1f MiB", r.AgentHeapMiB1000Groups), "<= 40 MiB", verdict(r.AgentHeapMiB1000Groups <= 40),
			"in-use heap after three passes whose innermost patch-agent frame is the agent's (not internal/sim, internal/testworld or internal/demo), heap profile at 64 KiB sampling"},
	}
}

// TestFleet runs the fleet scenario and the heap measurement alone and prints their figures
// (PATCH_AGENT_BENCH=1 go test ./internal/bench -run TestFleet -v), without writing the report.
func TestFleet(t *testing.T) {
	if os.Getenv("PATCH_AGENT_BENCH") == "" {
		t.Skip("measurements run with `make bench` (PATCH_AGENT_BENCH=1)")
	}
	groups, instances := fleetSize(t)
	r := results{fleetResults: fleetScenario(t, groups, instances)}
	r.AgentHeapMiB1000Groups = agentHeapMiB(t)
	for _, f := range fleetFigures(r) {
		t.Logf("%-66s %-28s goal %s", f.name, f.value, f.goal)
	}
}
