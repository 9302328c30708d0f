package checker

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
)

// Violation is one broken invariant (docs/architecture.md, "Invariants"), seen at one moment.
type Violation struct {
	At        time.Time `json:"at"`
	Invariant int       `json:"invariant"`
	Group     string    `json:"group,omitempty"`
	Detail    string    `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s invariant %d (%s): %s", v.At.Format(time.TimeOnly), v.Invariant, v.Group, v.Detail)
}

// Checker asserts the invariants of docs/architecture.md on the simulated account. It reads only the simulated
// world (internal/sim), never the agent's store. Once started (Start, or the first Check) it judges every change
// of the account (sim.Account.OnChange: every API call that changed something and every timed event), and Check
// judges the world again between agent iterations (with the Kubernetes nodes of EKS groups, which change outside
// the account). Finish makes the end-of-scenario checks.
//
//  1. serving capacity (InService, ACTIVE, agent connected, not DRAINING; for EKS groups InService with a
//     Ready, uncordoned node) never below the desired capacity others set (the group's baseline: its desired
//     capacity), at every change of the account, for every managed group and every
//     unmanaged group that shares an ECS cluster with a managed one — except for the instances others asked
//     for that have not yet had OthersBootTime to serve. The baseline follows the desired capacity changes that
//     are not the agent's (a user, an autoscaler, ECS managed scaling): a decrease lowers it at once, a raise
//     sets it at once. Others ask for instances by raising desired capacity (as many as the raise adds to the
//     baseline) and by terminating an instance without decrement (its replacement); each such instance is
//     exempt, while it is in the group and not yet serving, for OthersBootTime after the ask — and not once
//     serving has reached the baseline. An instance others asked for that launched on an AMI that cannot serve
//     (a bad AMI the agent rolls: during an instance refresh a scale out launches the refresh's configuration)
//     stays exempt past OthersBootTime while the agent's launching hook holds it within the agent's deadlines,
//     and its replacement gets OthersBootTime from the agent's ABANDON (heldLaunch). The agent's own instances
//     (Auto Scaling's replacement of an instance the agent terminated) are never exempt. Also: the agent makes no
//     SetDesiredCapacity call, no TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity and no
//     UpdateAutoScalingGroup that changes desired capacity or maximum size on a managed group (the account's
//     capacity writes). For groups whose desired capacity ECS managed scaling owns (Managed), every service of
//     Workloads keeps its desired count of tasks RUNNING instead;
//  2. no instance terminated through the API (the agent) before it was drained; no terminating lifecycle action
//     completed with CONTINUE by the agent before its instance was drained; and every instance of a managed
//     group, whatever ended its service (the agent, scale-in, a health check, a user, a timed-out hook), drained
//     when it leaves Terminating:Wait and starts shutting down. The last two hold except once DrainTimeout has
//     passed since the instance's termination began (the drain deadline exception);
//  3. at most BatchSize instances per group being replaced (DRAINING or cordoned, InService or in Terminating:Wait
//     by an instance refresh's termination) at a time, and
//     desired at most baseline+BatchSize; and at most ClusterBudget of them across every managed group of one
//     ECS or EKS cluster (the per-cluster budget);
//  4. no lifecycle action completed more than once, and (Finish) every lifecycle action Auto Scaling notified
//     for a managed group completed exactly once by CompleteLifecycleAction — not by its timeout, not left
//     waiting — with the expected result: CONTINUE for terminating actions; for launching actions CONTINUE
//     once the instance was healthy (container instance ACTIVE, agent connected), ABANDON only while it was not.
//
// A condition that lasts (serving below baseline, two instances DRAINING) is one violation from the change
// that began it until it ends.
type Checker struct {
	Account *sim.Account
	// Baseline is each managed group's desired capacity as the user set it (the checker keeps it current with
	// the desired capacity changes that are not the agent's).
	Baseline map[string]int32
	// BatchSize is how many instances of one group may be replaced at once (default 1); BatchSizes overrides it
	// per group (the group's patch-agent/batch-size tag, as NewWorld reads it).
	BatchSize  int
	BatchSizes map[string]int
	// ClusterBudget is how many instances of one cluster may be replaced at once across its managed groups
	// (the agent's --cluster-budget; default 1).
	ClusterBudget int
	// DrainTimeout is the agent's drain deadline (--drain-timeout; 0: none): an instance of a managed group may
	// shut down undrained once this long has passed since its termination began.
	DrainTimeout time.Duration
	// Queue, when set, is the agent's queue: invariant 4 covers the lifecycle actions notified to it ("": the
	// actions notified to any target).
	Queue string
	// HealthTimeout is the agent's health deadline (--health-timeout; 0: none): how long its launching hook may
	// hold a new instance in Pending:Wait before it ABANDONs it. With it, invariant 1 waits for the agent's
	// decision on an instance others asked for that launched on an AMI that cannot serve (heldLaunch); without
	// it, such an instance is exempt for OthersBootTime only.
	HealthTimeout time.Duration

	Violations []Violation
	// MinServing is the lowest serving capacity seen per group (managed and sharing a cluster).
	MinServing map[string]int

	// EKS names the groups whose instances are Kubernetes nodes (KubeSim): they serve when InService with a
	// Ready, uncordoned node, are being replaced when cordoned, and are drained when cordoned with no pod left
	// to evict. Nodes reports those nodes by instance id.
	EKS   map[string]bool
	Nodes func() (map[string]kubesim.NodeObservation, error)

	// Managed names the groups whose desired capacity ECS managed scaling owns (capacity providers): for them
	// invariant 1 is about workloads — every service keeps at least its desired count of tasks RUNNING
	// (Workloads) — and desired capacity may move without the agent.
	Managed map[string]bool
	// Workloads are "cluster/service" -> desired count of the services whose tasks must keep running.
	Workloads map[string]int
	// ECSDrains names the groups with ECS managed draining: ECS drains an instance after its termination is
	// requested, so invariant 2 holds when the instance was drained before it started shutting down.
	ECSDrains map[string]bool
	// Held, when set, reports whether the agent holds the terminating action of instance on hook of group at its
	// drain deadline (the action's record has DrainHeldAt: field case C9). Such an action waits at the end by
	// design: the agent heartbeats it and never completes it while the rollout is halted.
	Held func(group, instance, hook string) bool

	started  bool
	reported int                                // Violations returned by Check so far
	nodes    map[string]kubesim.NodeObservation // last observation of the Kubernetes nodes
	// shared are the unmanaged groups sharing an ECS cluster with a managed group, and their baseline.
	shared      map[string]int32
	seenDesired map[string]int
	// asks are, per group, the instances others asked for (raises of desired capacity, terminations without
	// decrement) in the last OthersBootTime, not yet served.
	asks map[string][]ask
	// stranded are, per group, the asks whose OthersBootTime ran out before serving reached the baseline: a
	// launch of a bad AMI the agent's launching hook holds may still stand for one of them (heldForOthers).
	stranded map[string][]ask
	// held are, per group, the instances on an AMI that cannot serve seen waiting on the agent's launching hook,
	// by instance id, until the agent decides or they leave Pending:Wait; firstAbandon is, per group and AMI
	// (heldKey), the agent's first ABANDON of such a launch; seenDecisions is a cursor into the completions.
	held          map[string]map[string]heldLaunch
	firstAbandon  map[string]time.Time
	seenDecisions int
	served        map[string]map[string]bool // per group, its instances that served since they entered it
	seenWrites    int                        // cursor into the account's capacity writes
	open          map[string]bool            // lasting conditions reported and not yet over
	// cursors into the account's terminations and completions, and the items waiting for their judgement
	seenTerminations, seenCompletions int
	toProceed                         []int // terminations (by index) to judge once their instance shuts down
	eksRequests                       []int // terminations of EKS groups to judge on the next nodes observed
	eksCompletions                    []sim.Completion
	accepted                          map[string]int // lifecycle action token -> accepted completions by the agent
	Final                             []Violation
	// shapes are the Managed groups' in-service instances per Availability Zone when the checker started.
	shapes map[string]map[string]int
	// refreshed are the instances an instance refresh terminated (sim.CauseRefresh), seenRefreshed a cursor into
	// the account's terminations: the rollout's replacements, drained in Terminating:Wait.
	refreshed     map[string]bool
	seenRefreshed int
}

// OthersBootTime is how long an instance others asked for (an autoscaler's raise of desired capacity, an
// operator's termination without decrement and its replacement) may take to serve before invariant 1 counts it:
// 5 minutes, the health check grace period Auto Scaling gives a new instance (the simulated groups report
// HealthCheckGracePeriod 300) and ECS managed scaling's default instance warm-up period (300 s). The simulated
// account boots an instance in 90 s and connects its container agent 20 s later; the rest is the agent's
// reaction (a launching hook completed on its next tick) and a Kubernetes node turning Ready.
const OthersBootTime = 5 * time.Minute

// ask is a number of instances others asked for at one moment.
type ask struct {
	at    time.Time
	units int32
}

// heldLaunch is an instance launched on an AMI that cannot serve (sim.Account.MarkImageUnhealthy) and seen in
// Pending:Wait on the agent's launching hook. Auto Scaling counts it as Pending, and nothing the agent does makes
// it serve: the agent can only ABANDON it (at its health deadline, or at once once its rollout halted at the
// first ABANDON of that AMI). When it stands for an instance others asked for — an autoscaler's scale out
// during an instance refresh launches the refresh's configuration (API Reference, StartInstanceRefresh:
// DesiredConfiguration) — invariant 1 waits for that decision instead of OthersBootTime, within the agent's
// deadlines only (decisionDue): a launch held past them no longer counts as booting at all. Each timely
// ABANDON of a launch in flight before that first ABANDON gives one unit of others' asks OthersBootTime again
// from the ABANDON (rearm), for Auto Scaling's replacement; a launch after the first ABANDON gives none, so a
// rollout that keeps launching the bad AMI (not halted) breaks invariant 1 within OthersBootTime.
type heldLaunch struct {
	image string
	// launched is the instance's launch time; waiting is when its launching action began (Pending:Wait).
	launched, waiting time.Time
}

// DecisionSlack is how long past a deadline the checker waits for the agent's decision on a held launch: the
// agent looks at every action it holds on each pass (every 5 s in a test world), and a minute covers a
// lifecycle message received late and a pass that waits for a retry.
const DecisionSlack = time.Minute

// NewChecker returns a checker for the given baselines. Set its other fields, then Start it.
func NewChecker(a *sim.Account, baseline map[string]int32) *Checker {
	return &Checker{Account: a, Baseline: baseline, BatchSize: 1, ClusterBudget: 1, MinServing: map[string]int{}}
}

// Start subscribes the checker to every change of the account (sim.Account.OnChange) and judges the account as
// it is now. Check starts a checker that was not started. Starting twice does nothing.
func (c *Checker) Start() {
	if c.started {
		return
	}
	c.started = true
	c.shared, c.seenDesired, c.open = map[string]int32{}, map[string]int{}, map[string]bool{}
	c.asks, c.served, c.stranded = map[string][]ask{}, map[string]map[string]bool{}, map[string][]ask{}
	c.held, c.firstAbandon = map[string]map[string]heldLaunch{}, map[string]time.Time{}
	c.accepted, c.refreshed = map[string]int{}, map[string]bool{}
	if c.Baseline == nil {
		c.Baseline = map[string]int32{}
	}
	c.refreshNodes()
	c.Account.OnChange(c.observe)
	c.Account.Observe(func(v *sim.View) {
		c.shapes = map[string]map[string]int{}
		for g := range c.Managed {
			c.shapes[g] = inServicePerAZ(v.Group(g))
		}
		c.observe(v)
	})
}

// Check looks at the account now (and at the Kubernetes nodes of EKS groups) and records any violation. It
// returns the violations recorded since the previous Check, those seen on the account's changes in between
// included.
func (c *Checker) Check() []Violation {
	c.Start()
	c.refreshNodes()
	c.Account.Observe(func(v *sim.View) {
		c.observe(v)
		c.judgeEKS(v)
	})
	found := append([]Violation(nil), c.Violations[c.reported:]...)
	c.reported = len(c.Violations)
	return found
}

// Finish makes the end-of-scenario checks after a last Check: every lifecycle action Auto Scaling notified for a
// managed group was completed exactly once, explicitly, with the expected result (invariant 4). It returns
// every violation of the run (Violations, then those of the end). Call it once the scenario has settled (the
// last lifecycle actions completed); calling it again repeats the end checks on the world as it is then.
func (c *Checker) Finish() []Violation {
	c.Check()
	c.Final = nil
	c.Account.Observe(c.finish)
	return append(append([]Violation(nil), c.Violations...), c.Final...)
}

func (c *Checker) refreshNodes() {
	if len(c.EKS) == 0 || c.Nodes == nil {
		return
	}
	n, err := c.Nodes()
	if err != nil {
		c.Violations = append(c.Violations, Violation{At: c.Account.Clock().Now(), Detail: fmt.Sprintf("reading the Kubernetes nodes: %v", err)})
		return
	}
	c.nodes = n
}

// add records a violation at the view's time.
func (c *Checker) add(v *sim.View, inv int, group, format string, args ...any) {
	c.Violations = append(c.Violations, Violation{At: v.Now(), Invariant: inv, Group: group, Detail: fmt.Sprintf(format, args...)})
}

// condition records a lasting condition once, when it begins; it may be recorded again after it ended.
func (c *Checker) condition(v *sim.View, holds bool, key string, inv int, group, format string, args ...any) {
	if !holds {
		delete(c.open, key)
		return
	}
	if !c.open[key] {
		c.open[key] = true
		c.add(v, inv, group, format, args...)
	}
}

// observe judges one state of the account: capacity (1), replacements under way (3), terminations and
// completions of ECS groups (2, 4). Kubernetes nodes are the last ones observed (they change between changes
// of the account, not with them); drains of EKS groups are judged by judgeEKS.
func (c *Checker) observe(v *sim.View) {
	groups := v.Groups()
	clusters := map[string]bool{}
	for _, g := range groups {
		if _, ok := c.Baseline[g.Name]; ok && g.Cluster != "" {
			clusters[g.Cluster] = true
		}
	}
	for _, g := range groups {
		_, managed := c.Baseline[g.Name]
		if _, known := c.shared[g.Name]; !managed && !known && clusters[g.Cluster] {
			c.shared[g.Name] = g.Desired // an unmanaged group in a managed cluster: its capacity as first seen
		}
	}
	c.capacityWrites(v)
	c.refreshTerminations(v)
	c.heldLaunches(v, groups)
	for _, g := range groups {
		c.capacity(v, g)
	}
	c.clusterDrains(v, groups)
	keys := make([]string, 0, len(c.Workloads))
	for k := range c.Workloads {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		want := c.Workloads[key]
		cluster, service, _ := strings.Cut(key, "/")
		running := v.ServiceTasks(cluster, service)
		// ECS keeps desired × minimumHealthyPercent RUNNING while it replaces a service's tasks
		// (100 % unless the service says otherwise).
		need := want
		if m, ok := v.ServiceMinimumHealthy(cluster, service); ok && m < need {
			need = m
		}
		c.condition(v, running < need, "1/"+key, 1, cluster, "service %s runs %d task(s), desired %d, at least %d by its minimumHealthyPercent",
			service, running, want, need)
	}
	c.terminations(v)
	c.completions(v)
}

// refreshTerminations notes the instances an instance refresh terminated since the last look.
func (c *Checker) refreshTerminations(v *sim.View) {
	terms := v.Terminations()
	for _, t := range terms[min(c.seenRefreshed, len(terms)):] {
		if t.Cause == sim.CauseRefresh {
			c.refreshed[t.InstanceID] = true
		}
	}
	c.seenRefreshed = len(terms)
}

// beingReplaced reports whether an instance DRAINING (ECS) or cordoned (EKS) counts as being replaced by a
// rollout (invariant 3): in service, or in Terminating:Wait by an instance refresh's termination, which the
// agent drains on its terminating hook. Instances other terminations take (scale-in, health) are not the
// rollout's.
func (c *Checker) beingReplaced(i sim.InstanceView) bool {
	return i.LifecycleState == "InService" || i.LifecycleState == "Terminating:Wait" && c.refreshed[i.ID]
}

// clusterDrains judges invariant 3 across the managed groups of one cluster (the per-cluster budget): at most
// ClusterBudget of their instances being replaced (beingReplaced) DRAINING (ECS) or cordoned (EKS) at a time,
// whichever group they belong to (the displaced tasks and pods of two drains compete for the same room).
func (c *Checker) clusterDrains(v *sim.View, groups []sim.GroupView) {
	draining := map[string][]string{}
	for _, g := range groups {
		if _, managed := c.Baseline[g.Name]; !managed && !c.Managed[g.Name] || g.Cluster == "" {
			continue
		}
		for _, i := range g.Instances {
			if !c.beingReplaced(i) {
				continue
			}
			if c.EKS[g.Name] {
				if n, ok := c.nodes[i.ID]; ok && n.Cordoned {
					draining[g.Cluster] = append(draining[g.Cluster], i.ID)
				}
			} else if i.ContainerInstanceStatus == "DRAINING" {
				draining[g.Cluster] = append(draining[g.Cluster], i.ID)
			}
		}
	}
	budget := max(c.ClusterBudget, 1)
	for _, cl := range sortedNames(c.clusterSeen(groups)) {
		ids := draining[cl]
		c.condition(v, len(ids) > budget, "3/cluster/"+cl, 3, cl, "%d instances of managed groups being replaced at once in cluster %s (%s): per-cluster budget %d",
			len(ids), cl, strings.Join(ids, ", "), budget)
	}
}

// clusterSeen returns the clusters of the managed groups.
func (c *Checker) clusterSeen(groups []sim.GroupView) map[string]bool {
	out := map[string]bool{}
	for _, g := range groups {
		if _, managed := c.Baseline[g.Name]; (managed || c.Managed[g.Name]) && g.Cluster != "" {
			out[g.Cluster] = true
		}
	}
	return out
}

// capacity judges invariants 1 and 3 for one group (managed, or unmanaged in a managed cluster).
func (c *Checker) capacity(v *sim.View, g sim.GroupView) {
	base, managed := c.Baseline[g.Name]
	shared := false
	if !managed {
		base, shared = c.shared[g.Name]
		if !shared {
			return
		}
	}
	base = c.followDesired(v, g.Name, base, managed)
	serving, draining := 0, 0
	for _, i := range g.Instances {
		if c.EKS[g.Name] {
			n, ok := c.nodes[i.ID]
			if i.LifecycleState == "InService" && ok && n.Ready && !n.Cordoned {
				serving++
			}
			if c.beingReplaced(i) && ok && n.Cordoned {
				draining++
			}
			continue
		}
		if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected {
			serving++
		}
		if i.ContainerInstanceStatus == "DRAINING" && c.beingReplaced(i) {
			draining++
		}
	}
	c.noteServed(g.Name, g.Instances)
	if m, ok := c.MinServing[g.Name]; !ok || serving < m {
		c.MinServing[g.Name] = serving
	}
	batch := max(c.BatchSize, 1)
	if n, ok := c.BatchSizes[g.Name]; ok {
		batch = max(n, 1)
	}
	if managed {
		c.condition(v, draining > batch, "3/draining/"+g.Name, 3, g.Name, "%d instances DRAINING at once (batch size %d)", draining, batch)
	}
	if c.Managed[g.Name] {
		return
	}
	req := c.requiredServing(v, g, base, serving)
	what := "desired"
	if shared {
		what = "desired (a group the agent does not manage, in a managed cluster)"
	}
	if req == base {
		c.condition(v, int32(serving) < req, "1/"+g.Name, 1, g.Name, "serving capacity %d below %s %d", serving, what, req)
	} else {
		c.condition(v, int32(serving) < req, "1/"+g.Name, 1, g.Name, "serving capacity %d below %s %d less %d instance(s) others asked for that are still booting",
			serving, what, base, base-req)
	}
	if managed {
		c.condition(v, g.Desired > base+int32(batch), "3/desired/"+g.Name, 3, g.Name, "desired capacity %d above baseline %d + batch size", g.Desired, base)
	}
}

// requiredServing returns the serving capacity invariant 1 holds the group to now: the baseline, less the
// instances others asked for that are in the group, not yet serving, and asked for less than OthersBootTime
// ago. Once serving reaches the baseline, every ask so far is served and no longer exempts anything.
func (c *Checker) requiredServing(v *sim.View, g sim.GroupView, base int32, serving int) int32 {
	if int32(serving) >= base {
		delete(c.asks, g.Name)
		delete(c.stranded, g.Name)
		return base
	}
	since := v.Now().Add(-OthersBootTime)
	var asked int32
	live := c.asks[g.Name][:0]
	for _, a := range c.asks[g.Name] {
		switch {
		case a.at.After(since):
			live = append(live, a)
			asked += a.units
		case c.HealthTimeout > 0:
			c.stranded[g.Name] = append(c.stranded[g.Name], a)
		}
	}
	c.asks[g.Name] = live
	asked += c.heldForOthers(v, g, base)
	if asked == 0 {
		return base
	}
	var booting int32 // in the group, not serving yet (an instance drawn from a warm pool keeps its first launch time)
	for _, i := range g.Instances {
		if h, held := c.held[g.Name][i.ID]; held && v.Now().After(c.decisionDue(g.Name, h)) {
			continue // on a bad AMI, its decision overdue: it is no longer on its way to serve
		}
		if c.booting(g.Name, i) {
			booting++
		}
	}
	return max(base-min(asked, booting), 0)
}

// heldKey keys firstAbandon: a group and an AMI.
func heldKey(group, image string) string { return group + "/" + image }

// heldLaunches notes the instances on an AMI that cannot serve that wait on the agent's launching hook (held),
// and judges the agent's ABANDONs of them since the last look: the first ABANDON of an AMI in a group is
// noted, and a timely one of a launch in flight before it gives one unit of others' asks OthersBootTime again
// (rearm). It runs before the capacity of the groups is judged, so that the state an ABANDON leaves is judged
// with it.
func (c *Checker) heldLaunches(v *sim.View, groups []sim.GroupView) {
	if c.HealthTimeout <= 0 {
		return
	}
	var actions []sim.LifecycleAction // read once, only when a new held launch is seen
	for _, g := range groups {
		for _, i := range g.Instances {
			if i.LifecycleState != "Pending:Wait" || !v.ImageUnhealthy(i.ImageID) {
				continue
			}
			if _, ok := c.held[g.Name][i.ID]; ok {
				continue
			}
			if actions == nil {
				actions = v.LifecycleActions()
			}
			for _, act := range actions {
				if act.InstanceID == i.ID && act.Active && act.Transition == sim.TransitionLaunching && act.Target != "" &&
					(c.Queue == "" || act.Target == c.Queue) {
					if c.held[g.Name] == nil {
						c.held[g.Name] = map[string]heldLaunch{}
					}
					c.held[g.Name][i.ID] = heldLaunch{image: i.ImageID, launched: i.LaunchTime, waiting: act.Started}
					break
				}
			}
		}
	}
	comps := v.LifecycleCompletions()
	for _, comp := range comps[min(c.seenDecisions, len(comps)):] {
		h, ok := c.held[comp.Group][comp.InstanceID]
		if !ok || !comp.Accepted || comp.Caller != sim.CallerAPI || comp.Transition != sim.TransitionLaunching {
			continue
		}
		delete(c.held[comp.Group], comp.InstanceID)
		if comp.Result != sim.ResultAbandon {
			continue
		}
		key := heldKey(comp.Group, h.image)
		if c.firstAbandon[key].IsZero() {
			c.firstAbandon[key] = comp.At
		}
		if !comp.At.After(c.decisionDue(comp.Group, h)) && h.launched.Before(c.firstAbandon[key]) {
			c.rearm(comp.Group, comp.At)
		}
	}
	c.seenDecisions = len(comps)
	for _, g := range groups { // a held launch that left Pending:Wait otherwise (its group, a timeout) is forgotten
		if len(c.held[g.Name]) == 0 {
			continue
		}
		waiting := map[string]bool{}
		for _, i := range g.Instances {
			waiting[i.ID] = i.LifecycleState == "Pending:Wait"
		}
		for id := range c.held[g.Name] {
			if !waiting[id] {
				delete(c.held[g.Name], id)
			}
		}
	}
}

// decisionDue is when the agent must have decided a held launch: at its health deadline, and once it has
// ABANDONed a launch of the same AMI in the group (the first ABANDON halts the rollout) at once — at that
// ABANDON, or when the launch began waiting if later — each with DecisionSlack.
func (c *Checker) decisionDue(group string, h heldLaunch) time.Time {
	due := h.waiting.Add(c.HealthTimeout)
	if first := c.firstAbandon[heldKey(group, h.image)]; !first.IsZero() {
		due = minTime(due, maxTime(first, h.waiting))
	}
	return due.Add(DecisionSlack)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// heldForOthers counts the held launches of the group within their decisionDue that stand for a stranded
// ask, at most one a unit. Auto Scaling's instances are interchangeable: those the group runs beyond the
// desired capacity others set (an instance refresh's launches above it) are the agent's, the others fill that desired
// capacity, so the held launches beyond that surplus stand for others' asks — the refresh's own launch of the
// bad AMI too when a raise to MaxSize took its room.
func (c *Checker) heldForOthers(v *sim.View, g sim.GroupView, base int32) int32 {
	var units int32
	for _, a := range c.stranded[g.Name] {
		units += a.units
	}
	if units == 0 {
		return 0
	}
	var held, inCapacity int32
	for _, i := range g.Instances {
		if i.CountsTowardCapacity() {
			inCapacity++
		}
		if h, ok := c.held[g.Name][i.ID]; ok && !v.Now().After(c.decisionDue(g.Name, h)) {
			held++
		}
	}
	return min(units, max(held-max(inCapacity-base, 0), 0))
}

// rearm moves one unit of the earliest ask an ABANDONed held launch may have stood for — a stranded one first,
// else one still within its OthersBootTime — to a new ask at at: Auto Scaling launches a replacement for it.
func (c *Checker) rearm(group string, at time.Time) {
	for _, m := range []map[string][]ask{c.stranded, c.asks} {
		if list := m[group]; len(list) > 0 {
			if list[0].units--; list[0].units <= 0 {
				list = list[1:]
			}
			m[group] = list
			c.asks[group] = append(c.asks[group], ask{at: at, units: 1})
			return
		}
	}
}

// booting reports whether an instance of the group is on its way to serve: launching (Pending, Pending:Wait,
// Pending:Proceed), or InService and not serving since it entered the group (an instance that served and is
// now drained, DRAINING or cordoned, is not booting; one drawn from a warm pool is until it serves).
func (c *Checker) booting(group string, i sim.InstanceView) bool {
	switch i.LifecycleState {
	case "Pending", "Pending:Wait", "Pending:Proceed":
		return true
	case "InService":
		return !c.served[group][i.ID] && !c.serves(group, i)
	}
	return false
}

// noteServed records which instances of the group served since they entered it (booting); an instance that
// left the group (into a warm pool) enters it afresh.
func (c *Checker) noteServed(group string, instances []sim.InstanceView) {
	served := map[string]bool{}
	for _, i := range instances {
		served[i.ID] = c.served[group][i.ID] || c.serves(group, i)
	}
	c.served[group] = served
}

// serves reports whether an instance of the group serves (counts in serving capacity).
func (c *Checker) serves(group string, i sim.InstanceView) bool {
	if c.EKS[group] {
		n, ok := c.nodes[i.ID]
		return i.LifecycleState == "InService" && ok && n.Ready && !n.Cordoned
	}
	return i.LifecycleState == "InService" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected
}

// capacityWrites reads the account's capacity writes since the last look: an operator's termination without
// decrement asks for one instance (Auto Scaling's replacement), and every write of the agent on a managed
// group is a violation of invariant 1.
func (c *Checker) capacityWrites(v *sim.View) {
	writes := v.CapacityWrites()
	for _, w := range writes[min(c.seenWrites, len(writes)):] {
		_, managed := c.Baseline[w.Group]
		_, shared := c.shared[w.Group]
		switch {
		case w.By == sim.CallerAPI:
			if !managed {
				continue
			}
			switch {
			case w.Op == sim.OpSetDesiredCapacity:
				c.add(v, 1, w.Group, "the agent wrote desired capacity: SetDesiredCapacity %d -> %d", w.From, w.To)
			case w.Op == sim.OpTerminateInstance && w.Decrement:
				c.add(v, 1, w.Group, "the agent wrote desired capacity: TerminateInstanceInAutoScalingGroup %s with decrement (%d -> %d)", w.InstanceID, w.From, w.To)
			case w.Op == sim.OpUpdateAutoScalingGroup && (w.From != w.To || w.MaxFrom != w.MaxTo):
				c.add(v, 1, w.Group, "the agent wrote desired capacity or maximum size: UpdateAutoScalingGroup desired %d -> %d, max %d -> %d", w.From, w.To, w.MaxFrom, w.MaxTo)
			}
		case w.Op == sim.OpTerminateInstance && !w.Decrement && w.Accepted && (managed || shared):
			c.asks[w.Group] = append(c.asks[w.Group], ask{at: w.At, units: 1})
		}
	}
	c.seenWrites = len(writes)
}

// followDesired moves a group's baseline with the desired capacity changes made by others than the agent
// (users, autoscalers) since the last look, and returns it. A raise sets the baseline to what the other actor
// set. A decrease lowers it by the other actor's change only, never above what it set: desired capacity it
// lowered may still hold a write of the agent (itself a violation of invariant 1), which is not the other
// actor's to count (6 -> 7 by the agent, then 6 by an autoscaler: baseline 5, not 6).
func (c *Checker) followDesired(v *sim.View, group string, base int32, managed bool) int32 {
	changes := v.DesiredChanges(group)
	for _, ch := range changes[min(c.seenDesired[group], len(changes)):] {
		switch {
		case ch.By == sim.CallerAPI:
		case ch.To >= ch.From:
			if ch.To > base {
				c.asks[group] = append(c.asks[group], ask{at: ch.At, units: ch.To - base})
			}
			base = ch.To
		default:
			base = max(min(base+ch.To-ch.From, ch.To), 0)
		}
	}
	c.seenDesired[group] = len(changes)
	if managed {
		c.Baseline[group] = base
	} else {
		c.shared[group] = base
	}
	return base
}

// terminations judges invariant 2 for ECS groups: agent terminations when requested, every termination of a
// managed group when its instance starts shutting down.
func (c *Checker) terminations(v *sim.View) {
	terms := v.Terminations()
	for i := c.seenTerminations; i < len(terms); i++ {
		t := terms[i]
		c.toProceed = append(c.toProceed, i)
		if c.EKS[t.Group] {
			c.eksRequests = append(c.eksRequests, i)
			continue
		}
		if t.Cause == sim.CauseAPI && !t.DrainedAtRequest && !c.ECSDrains[t.Group] {
			c.add(v, 2, t.Group, "instance %s terminated while not drained (container instance %s, %d task(s) not STOPPED)",
				t.InstanceID, t.ContainerInstanceStatus, t.NonStoppedTasks)
		}
	}
	c.seenTerminations = len(terms)
	waiting := c.toProceed[:0]
	for _, i := range c.toProceed {
		t := terms[i]
		if !t.Proceeded || c.EKS[t.Group] {
			waiting = append(waiting, i)
			continue
		}
		if _, managed := c.Baseline[t.Group]; !managed || t.DrainedAtProceed || c.pastDeadline(v, t) {
			continue
		}
		c.add(v, 2, t.Group, "instance %s (termination cause %s) started shutting down while not drained%s", t.InstanceID, t.Cause, c.how(v, t))
	}
	c.toProceed = waiting
}

// pastDeadline reports whether the instance left Terminating:Wait at or after the drain deadline.
func (c *Checker) pastDeadline(v *sim.View, t sim.Termination) bool {
	return c.DrainTimeout > 0 && t.ProceededAt.Sub(t.RequestedAt) >= c.DrainTimeout || hookLimitPassed(v, t, t.ProceededAt)
}

// hookLimitPassed reports whether, at at, a terminating lifecycle action of t's termination had run past the
// drain limit its hook's global timeout allows (providers.HookDrainLimit): the drain deadline the agent caps
// --drain-timeout to for that hook, since Auto Scaling would end the action at its global timeout anyway.
func hookLimitPassed(v *sim.View, t sim.Termination, at time.Time) bool {
	for _, act := range v.LifecycleActions() {
		if act.InstanceID != t.InstanceID || act.Transition != sim.TransitionTerminating || act.Started.Before(t.RequestedAt) ||
			act.GlobalDeadline.IsZero() {
			continue
		}
		if !at.Before(act.Started.Add(providers.HookDrainLimit(act.GlobalDeadline.Sub(act.Started)))) {
			return true
		}
	}
	return false
}

// how says how the instance's terminating lifecycle actions ended, for a violation's detail.
func (c *Checker) how(v *sim.View, t sim.Termination) string {
	var parts []string
	for _, act := range v.LifecycleActions() {
		if act.InstanceID != t.InstanceID || act.Transition != sim.TransitionTerminating || act.Started.Before(t.RequestedAt) {
			continue
		}
		switch {
		case act.TimedOut:
			parts = append(parts, fmt.Sprintf("hook %s timed out (%s)", act.Hook, act.Result))
		case act.Result != "":
			parts = append(parts, fmt.Sprintf("hook %s completed %s", act.Hook, act.Result))
		}
	}
	if len(parts) == 0 {
		return " (no terminating lifecycle hook held it)"
	}
	return ": " + strings.Join(parts, ", ")
}

// completions judges the CompleteLifecycleAction calls: CONTINUE of a terminating action before the instance
// was drained (2), a second accepted completion of one action (4). EKS groups' drains are judged by judgeEKS.
func (c *Checker) completions(v *sim.View) {
	comps := v.LifecycleCompletions()
	for _, comp := range comps[c.seenCompletions:] {
		if comp.Accepted {
			c.accepted[comp.Token]++
			if c.accepted[comp.Token] == 2 {
				c.add(v, 4, comp.Group, "lifecycle action %s of %s completed twice", comp.Token, comp.InstanceID)
			}
		}
		if c.EKS[comp.Group] {
			c.eksCompletions = append(c.eksCompletions, comp)
			continue
		}
		c.judgeCompletion(v, comp)
	}
	c.seenCompletions = len(comps)
}

func (c *Checker) judgeCompletion(v *sim.View, comp sim.Completion) {
	if !comp.Accepted || comp.Caller != sim.CallerAPI || comp.Transition != sim.TransitionTerminating ||
		comp.Result != sim.ResultContinue || comp.Drained {
		return
	}
	if c.DrainTimeout > 0 {
		terms := v.Terminations()
		for i := len(terms) - 1; i >= 0; i-- {
			if t := terms[i]; t.InstanceID == comp.InstanceID {
				if comp.At.Sub(t.RequestedAt) >= c.DrainTimeout || hookLimitPassed(v, t, comp.At) {
					return // the drain deadline exception
				}
				break
			}
		}
	}
	c.add(v, 2, comp.Group, "terminating lifecycle action of %s completed (CONTINUE) while the instance was not drained", comp.InstanceID)
}

// judgeEKS judges invariant 2 for EKS groups on the Kubernetes nodes just observed: completions, agent
// terminations and instances that started shutting down since the last look.
func (c *Checker) judgeEKS(v *sim.View) {
	for _, comp := range c.eksCompletions {
		if n, ok := c.nodes[comp.InstanceID]; ok {
			comp.Drained = n.Drained()
		}
		c.judgeCompletion(v, comp)
	}
	c.eksCompletions = nil
	terms := v.Terminations()
	for _, i := range c.eksRequests {
		t := terms[i]
		if n, ok := c.nodes[t.InstanceID]; t.Cause == sim.CauseAPI && ok && !n.Drained() {
			c.add(v, 2, t.Group, "instance %s terminated while its node %s was not drained (cordoned %v, %d pod(s) to evict)",
				t.InstanceID, n.Name, n.Cordoned, n.Evictable)
		}
	}
	c.eksRequests = nil
	waiting := c.toProceed[:0]
	for _, i := range c.toProceed {
		t := terms[i]
		if !c.EKS[t.Group] || !t.Proceeded {
			waiting = append(waiting, i)
			continue
		}
		n, ok := c.nodes[t.InstanceID]
		if _, managed := c.Baseline[t.Group]; managed && ok && !n.Drained() && !c.pastDeadline(v, t) {
			c.add(v, 2, t.Group, "instance %s (termination cause %s) started shutting down while its node %s was not drained (cordoned %v, %d pod(s) to evict)%s",
				t.InstanceID, t.Cause, n.Name, n.Cordoned, n.Evictable, c.how(v, t))
		}
	}
	c.toProceed = waiting
}

// inServicePerAZ counts a group's InService instances per Availability Zone.
func inServicePerAZ(g sim.GroupView) map[string]int {
	out := map[string]int{}
	for _, i := range g.Instances {
		if i.LifecycleState == "InService" {
			out[i.AvailabilityZone]++
		}
	}
	return out
}

// excusedScaleIns counts the scale-in terminations of a group that followed a lowering of its desired capacity
// by someone other than the agent (ECS managed scaling, a user): the simulation records the cause of every
// termination and who made every desired capacity change.
func excusedScaleIns(v *sim.View, group string) int {
	changes := v.DesiredChanges(group)
	n := 0
	for _, t := range v.Terminations() {
		if t.Group != group || t.Cause != sim.CauseScaleIn {
			continue
		}
		by := ""
		for _, ch := range changes {
			if ch.At.After(t.RequestedAt) {
				break
			}
			by = ch.By
		}
		if by != "" && by != sim.CallerAPI {
			n++
		}
	}
	return n
}

// finishShapes is the end-of-scenario check of the groups ECS managed scaling owns: a group's
// in-service instance count and its number of Availability Zones are not lower than when the checker started,
// unless a scale-in that ECS (or a user) decided accounts for each missing instance (invariant 1).
func (c *Checker) finishShapes(v *sim.View, add func(inv int, group, format string, args ...any)) {
	for _, g := range sortedNames(c.shapes) {
		start, now := c.shapes[g], inServicePerAZ(v.Group(g))
		excused := excusedScaleIns(v, g)
		count := func(m map[string]int) int {
			n := 0
			for _, k := range m {
				n += k
			}
			return n
		}
		if count(now)+excused < count(start) {
			add(1, g, "group ends with %d in-service instance(s), %d at the start (%d scale-in(s) decided by ECS or a user)", count(now), count(start), excused)
		}
		if len(now)+excused < len(start) {
			add(1, g, "group ends in %d Availability Zone(s) %v, %d at the start %v (%d scale-in(s) decided by ECS or a user)", len(now), now, len(start), start, excused)
		}
	}
}

func sortedNames[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// finish makes the end-of-scenario checks: invariant 4, and the size and spread of the groups ECS managed
// scaling owns.
func (c *Checker) finish(v *sim.View) {
	add := func(inv int, group, format string, args ...any) {
		c.Final = append(c.Final, Violation{At: v.Now(), Invariant: inv, Group: group, Detail: fmt.Sprintf(format, args...)})
	}
	c.finishShapes(v, add)
	byToken := map[string][]sim.Completion{}
	for _, comp := range v.LifecycleCompletions() {
		if comp.Accepted && comp.Caller == sim.CallerAPI {
			byToken[comp.Token] = append(byToken[comp.Token], comp)
		}
	}
	for _, act := range v.LifecycleActions() {
		if _, managed := c.Baseline[act.Group]; !managed || act.Target == "" || (c.Queue != "" && act.Target != c.Queue) {
			continue
		}
		kind := "terminating"
		if act.Transition == sim.TransitionLaunching {
			kind = "launching"
		}
		done := byToken[act.Token]
		switch {
		case act.Active && kind == "terminating" && c.Held != nil && c.Held(act.Group, act.InstanceID, act.Hook):
			continue
		case act.Active:
			add(4, act.Group, "%s lifecycle action %s of %s (hook %s) still waiting at the end: never completed", kind, act.Token, act.InstanceID, act.Hook)
			continue
		case len(done) == 0 && act.TimedOut:
			add(4, act.Group, "%s lifecycle action %s of %s (hook %s) timed out (%s by default): never completed by CompleteLifecycleAction",
				kind, act.Token, act.InstanceID, act.Hook, act.Result)
			continue
		case len(done) == 0:
			continue // cancelled (its instance was terminated while it waited) or ended by another hook's ABANDON
		case len(done) > 1:
			continue // reported when it happened
		}
		comp := done[0]
		switch {
		case act.Transition == sim.TransitionTerminating && comp.Result != sim.ResultContinue:
			add(4, act.Group, "terminating lifecycle action %s of %s completed %s, not CONTINUE", act.Token, act.InstanceID, comp.Result)
		case act.Transition == sim.TransitionLaunching && !c.EKS[act.Group] && comp.Result == sim.ResultContinue && !comp.Healthy &&
			comp.LifecycleState != "Warmed:Pending:Wait":
			// A launch into the warm pool is continued without cluster health: the instance stops in the pool
			// (field case C18; Amazon EC2 Auto Scaling User Guide, "Use lifecycle hooks with a warm pool").
			add(4, act.Group, "launching lifecycle action %s of %s completed CONTINUE before the instance was healthy", act.Token, act.InstanceID)
		case act.Transition == sim.TransitionLaunching && !c.EKS[act.Group] && comp.Result == sim.ResultAbandon && comp.Healthy &&
			!comp.OutdatedFromPool:
			// An instance leaving the warm pool on the old configuration during a refresh is abandoned healthy or
			// not: no old AMI enters service from the pool once a rollout started (field case C18).
			add(4, act.Group, "launching lifecycle action %s of %s completed ABANDON while the instance was healthy", act.Token, act.InstanceID)
		}
	}
}
