package metrics

import (
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// DefaultStaleAfter is how long a group's gauges stay published after it was last observed.
const DefaultStaleAfter = 15 * time.Minute

// Registry keeps the agent's metrics. It implements model.Observer: the agent tells it every rollout
// transition, every observation of a target and every completed lifecycle action. Safe for concurrent use;
// every observer call is a map update under a mutex.
type Registry struct {
	// StaleAfter is how long the gauges of a group stay published after it was last observed (a group that
	// was opted out or deleted stops being reported; its counters are kept). Default DefaultStaleAfter.
	StaleAfter time.Duration
	// Consumer returns the queue consumer's counters (the agent's Consumer.Stats); nil leaves the message
	// metrics out. Called at every Collect, so it may follow a consumer that is replaced.
	Consumer func() *events.Stats
	// Clock tells the time of observations (AMI age, staleness); nil is the real clock. Set it before the
	// first observation.
	Clock clock.PassiveClock

	mu     sync.Mutex
	groups map[string]*groupState
	// rejected counts LifecycleMessagesRejected by reason.
	rejected map[string]int64
}

// groupState is what the registry knows about one group.
type groupState struct {
	platform string
	seen     time.Time // last observer call about the group

	observed                      bool // TargetObserved at least once: instance counts known
	instances, onTarget, outdated int
	targetKnown                   bool

	phaseKnown     bool
	active, halted bool
	sourceModified time.Time

	drain      time.Duration
	drainKnown bool

	// refreshID and refreshLeft are the agent's instance refresh last seen and its instances left to update
	// (Replacements succeeded counts what it updated).
	refreshID   string
	refreshLeft int32

	succeeded, failed, lifecycle int64
	setBacks                     int64            // model.AlertSetBack alerts
	rejected                     map[string]int64 // AMI gate refusals by reason
	alerts                       map[string]int64 // alerts by kind
}

// NewRegistry returns an empty registry whose time (AMI age, staleness) is clk; nil means the real clock.
func NewRegistry(clk clock.PassiveClock) *Registry {
	return &Registry{Clock: clk, groups: map[string]*groupState{}}
}

func (r *Registry) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

var _ model.Observer = (*Registry)(nil)

// group returns the state of name, creating it; the caller holds r.mu.
func (r *Registry) group(name, platform string) *groupState {
	if r.groups == nil {
		r.groups = map[string]*groupState{}
	}
	g, ok := r.groups[name]
	if !ok {
		g = &groupState{}
		r.groups[name] = g
	}
	if platform != "" {
		g.platform = platform
	}
	g.seen = r.now()
	return g
}

// RolloutTransition implements model.Observer: phase gauges and replacement counters. Drain durations come
// from the terminating lifecycle actions the agent completes (LifecycleActionCompleted).
func (r *Registry) RolloutTransition(prev, next state.Rollout, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(next.Group, next.Platform)
	g.setPhase(next)
	if next.TargetImageID == prev.TargetImageID && len(next.Replaced) > len(prev.Replaced) {
		g.succeeded += int64(len(next.Replaced) - len(prev.Replaced))
	}
	// An instance refresh keeps no list of replaced instances: the instances it updated are the fall of its
	// InstancesToUpdate, counted against the last value this registry saw (prev may share next's progress).
	if p := next.Refresh; p != nil && p.ID != "" && !p.Rollback {
		if p.ID == g.refreshID && p.InstancesToUpdate < g.refreshLeft {
			g.succeeded += int64(g.refreshLeft - p.InstancesToUpdate)
		}
		g.refreshID, g.refreshLeft = p.ID, p.InstancesToUpdate
	}
	if haltedPhase(next.Phase) && !haltedPhase(prev.Phase) && next.Current != nil {
		g.failed++
	}
}

// TargetObserved implements model.Observer: instance counts against the target AMI (the rollout's
// target, else the AMI the source names) and the phase gauges.
func (r *Registry) TargetObserved(t model.Target, v model.GroupView, ro state.Rollout, ami *model.ResolvedAMI) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(t.Group, t.Platform)
	g.observed = true
	g.instances = len(v.Instances)
	target := ro.TargetImageID
	if target == "" && ami != nil {
		target = ami.ImageID
	}
	g.targetKnown = target != ""
	g.onTarget, g.outdated = 0, 0
	if g.targetKnown {
		g.onTarget = v.CountOnImage(target)
		for _, i := range v.Instances {
			if i.ImageID != target && !strings.HasPrefix(i.LifecycleState, "Terminat") {
				g.outdated++
			}
		}
	}
	if ro.Group != "" { // a zero record: the tick could not read it
		g.setPhase(ro)
	}
}

// LifecycleActionCompleted implements model.Observer: the completion counter and, for a drain, its duration.
func (r *Registry) LifecycleActionCompleted(h state.Hook, drain time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(h.Group, "")
	g.lifecycle++
	if drain > 0 {
		g.drain, g.drainKnown = drain, true
	}
}

// LifecycleMessageRejected implements model.Observer: LifecycleMessagesRejected by reason. Not per group:
// the group a rejected message names is a claim, and series are not made from claims.
func (r *Registry) LifecycleMessageRejected(rej model.Rejection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rejected == nil {
		r.rejected = map[string]int64{}
	}
	r.rejected[rej.Reason]++
}

// AMIRejected implements model.AMIRejectionObserver: the AMIRejected counter of the group and reason.
func (r *Registry) AMIRejected(t model.Target, _ state.Rollout, rej model.AMIRejection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(t.Group, t.Platform)
	if g.rejected == nil {
		g.rejected = map[string]int64{}
	}
	g.rejected[rej.Reason]++
}

var _ model.AMIRejectionObserver = (*Registry)(nil)

// Alert implements model.AlertObserver: the Alerts counter of the group and kind.
func (r *Registry) Alert(a model.Alert) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(a.Target.Group, a.Target.Platform)
	if g.alerts == nil {
		g.alerts = map[string]int64{}
	}
	g.alerts[a.Kind]++
	if a.Kind == model.AlertSetBack {
		g.setBacks++
	}
}

var _ model.AlertObserver = (*Registry)(nil)

func (g *groupState) setPhase(ro state.Rollout) {
	g.phaseKnown = true
	g.active = ro.Active()
	failed := strings.HasPrefix(ro.Reason, "failed")
	g.halted = ro.Phase == state.PhaseHalted ||
		(ro.Phase == state.PhaseRollingBack || ro.Phase == state.PhaseRolledBack) && failed
	g.sourceModified = ro.SourceModified
}

// haltedPhase reports whether a rollout in phase p stopped on a failure (with or without rollback).
func haltedPhase(p state.Phase) bool { return p == state.PhaseHalted || p == state.PhaseRollingBack }

// Sample is one value of one series.
type Sample struct {
	Definition
	// Group and Platform are the dimensions of per-group metrics ("" for agent-wide ones; Platform "" when
	// not known yet).
	Group, Platform string
	// Reason is the dimension of LifecycleMessagesRejected and the third dimension of AMIRejected ("" for every
	// other metric).
	Reason string
	// Value is the gauge's current value, or the counter's cumulative total since the registry was created.
	Value float64
}

// Key returns the sample's SeriesKey: for a Reason, ReasonSeriesKey without a group and
// "Name{Group=g,Platform=p,Reason=r}" with one.
func (s Sample) Key() string {
	if s.Reason != "" && s.Group == "" {
		return ReasonSeriesKey(s.Name, s.Reason)
	}
	k := SeriesKey(s.Name, s.Group, s.Platform)
	if s.Reason != "" {
		k = k[:len(k)-1] + "," + DimensionReason + "=" + s.Reason + "}"
	}
	return k
}

// ReasonSeriesKey names one series of a metric with a Reason dimension in Snapshot: "Name{Reason=r}".
func ReasonSeriesKey(name, reason string) string {
	return name + "{" + DimensionReason + "=" + reason + "}"
}

// Collect returns the current value of every series: per-group series by group name, then the agent-wide
// ones, each in Definitions order. Gauges of a group not observed for StaleAfter are left out, as are
// instance counts never observed, the AMI age of a rollout without a source time, and the drain time before
// the first drain. AgentHeartbeat is always 1.
func (r *Registry) Collect() []Sample {
	now := r.now()
	stale := r.StaleAfter
	if stale <= 0 {
		stale = DefaultStaleAfter
	}
	r.mu.Lock()
	names := make([]string, 0, len(r.groups))
	for n := range r.groups {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Sample
	for _, name := range names {
		g := r.groups[name]
		fresh := now.Sub(g.seen) <= stale
		for _, d := range definitions {
			if !d.PerGroup {
				continue
			}
			if d.Name == AMIRejected || d.Name == Alerts {
				counts := g.rejected
				if d.Name == Alerts {
					counts = g.alerts
				}
				reasons := make([]string, 0, len(counts))
				for reason := range counts {
					reasons = append(reasons, reason)
				}
				sort.Strings(reasons)
				for _, reason := range reasons {
					out = append(out, Sample{Definition: d, Group: name, Platform: g.platform, Reason: reason, Value: float64(counts[reason])})
				}
				continue
			}
			v, ok := g.value(d.Name, now)
			if !ok || d.Kind == Gauge && !fresh {
				continue
			}
			out = append(out, Sample{Definition: d, Group: name, Platform: g.platform, Value: v})
		}
	}
	reasons := make([]string, 0, len(r.rejected))
	for reason := range r.rejected {
		reasons = append(reasons, reason)
	}
	sort.Strings(reasons)
	rejected := make([]float64, len(reasons))
	for i, reason := range reasons {
		rejected[i] = float64(r.rejected[reason])
	}
	r.mu.Unlock()
	var st *events.Stats
	if r.Consumer != nil {
		st = r.Consumer()
	}
	for _, d := range definitions {
		if d.PerGroup {
			continue
		}
		var v float64
		switch d.Name {
		case LifecycleMessagesRejected:
			for i, reason := range reasons {
				out = append(out, Sample{Definition: d, Reason: reason, Value: rejected[i]})
			}
			continue
		case AgentHeartbeat:
			v = 1
		default:
			if st == nil {
				continue
			}
			v = consumerValue(st, d.Name)
		}
		out = append(out, Sample{Definition: d, Value: v})
	}
	return out
}

// value returns the group's value of a per-group metric, and whether it is known.
func (g *groupState) value(name string, now time.Time) (float64, bool) {
	switch name {
	case InstancesTotal:
		return float64(g.instances), g.observed
	case InstancesOnTargetAMI:
		return float64(g.onTarget), g.observed && g.targetKnown
	case InstancesOutdated:
		return float64(g.outdated), g.observed && g.targetKnown
	case TargetAMIAgeHours:
		return now.Sub(g.sourceModified).Hours(), g.phaseKnown && !g.sourceModified.IsZero()
	case RolloutInProgress:
		return b2f(g.active), g.phaseKnown
	case RolloutHalted:
		return b2f(g.halted), g.phaseKnown
	case DrainSeconds:
		return g.drain.Seconds(), g.drainKnown
	case ReplacementsSucceeded:
		return float64(g.succeeded), true
	case ReplacementsFailed:
		return float64(g.failed), true
	case LifecycleActionsCompleted:
		return float64(g.lifecycle), true
	case SetBacks:
		return float64(g.setBacks), true
	}
	return 0, false
}

func consumerValue(st *events.Stats, name string) float64 {
	switch name {
	case MessagesProcessed:
		return float64(st.Processed.Load())
	case MessagesIgnored:
		return float64(st.Ignored.Load())
	case MessagesFailed:
		return float64(st.Failed.Load())
	case OldestMessageAgeSeconds:
		return float64(st.OldestMessageAgeSeconds.Load())
	}
	return 0
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
