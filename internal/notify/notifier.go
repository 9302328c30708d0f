package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Limits of PutEvents (Amazon EventBridge API Reference, "PutEvents": 1 to 10 entries; the total entry size
// of a request at most 256 KB). Batches stay below the size limit with a margin for the envelope.
const (
	MaxEntriesPerCall  = 10
	maxBatchBytes      = 200 * 1024
	defaultBuffer      = 1000
	sendTimeout        = 10 * time.Second
	shutdownFlushLimit = 10 * time.Second
)

// PutEventsAPI is the EventBridge call the Notifier makes (awsapi.EventBridge and *eventbridge.Client have it).
type PutEventsAPI interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// Options configure a Notifier.
type Options struct {
	// Bus is the event bus name or ARN; default DefaultBus.
	Bus string
	// Log receives send failures and dropped events; nil discards them.
	Log *zap.Logger
	// Buffer is how many events may wait to be sent; when it is full new events are dropped (and logged) so
	// that the agent's work never waits on EventBridge. Default 1000.
	Buffer int
	// AgentVersion goes into every event's detail (agentVersion): which build of the agent acted.
	AgentVersion string
}

// Notifier turns observed rollout transitions and lifecycle completions into EventBridge events. Observer
// calls only queue the event; Run sends the queue in PutEvents batches. Sending is at least once per change
// as the agent sees it: an agent restarted in the middle of a rollout may announce its start again. Failures
// are logged and counted, never returned to the agent.
type Notifier struct {
	api   PutEventsAPI
	bus   string
	log   *zap.Logger
	agent string // Options.AgentVersion
	queue chan ebtypes.PutEventsRequestEntry

	sent, failed, dropped atomic.Int64

	mu        sync.Mutex
	targets   map[string]targetInfo // by group: what lifecycle events need
	announced map[string]string     // by group: the rollout whose start was announced (target@detectedAt)
}

type targetInfo struct{ platform, cluster string }

// Log fields of notification problems (beside internal/logging's).
const (
	fieldDetailType = "detail_type"
	fieldDetail     = "detail"
)

var _ model.Observer = (*Notifier)(nil)

// New returns a Notifier sending through api. Start Run to send; without Run, Flush sends what is queued.
func New(api PutEventsAPI, o Options) *Notifier {
	if o.Bus == "" {
		o.Bus = DefaultBus
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Buffer <= 0 {
		o.Buffer = defaultBuffer
	}
	return &Notifier{api: api, bus: o.Bus, log: o.Log, agent: o.AgentVersion, queue: make(chan ebtypes.PutEventsRequestEntry, o.Buffer),
		targets: map[string]targetInfo{}, announced: map[string]string{}}
}

// Stats returns how many events were accepted by EventBridge, failed (call error or failed entry) and were
// dropped because the buffer was full.
func (n *Notifier) Stats() (sent, failed, dropped int64) {
	return n.sent.Load(), n.failed.Load(), n.dropped.Load()
}

// RolloutTransition implements model.Observer: it queues a "Rollout State Change" event for the changes
// listed at the Event* constants.
func (n *Notifier) RolloutTransition(prev, next state.Rollout, _ string) {
	n.mu.Lock()
	n.remember(next.Group, next.Platform, next.Cluster)
	var kinds []string
	if prev.Phase == state.PhaseDetected || next.Phase == state.PhaseDetected {
		// The agent writes Detected on detection; a manual rollback writes it outside the agent, so the
		// agent's first transition of that rollout leaves Detected. Either announces the start, once.
		key := next.TargetImageID + "@" + next.DetectedAt.UTC().Format(time.RFC3339Nano)
		if n.announced[next.Group] != key {
			n.announced[next.Group] = key
			kinds = append(kinds, EventStarted)
		}
	}
	n.mu.Unlock()
	if g := gateOf(next.Reason); g != "" && g != gateOf(prev.Reason) {
		kinds = append(kinds, EventWaiting)
	}
	if next.Phase != prev.Phase {
		switch next.Phase {
		case state.PhaseHalted:
			kinds = append(kinds, EventHalted)
		case state.PhaseRollingBack:
			kinds = append(kinds, EventRollingBack)
		case state.PhaseRolledBack:
			kinds = append(kinds, EventRolledBack)
		case state.PhaseCompleted:
			kinds = append(kinds, EventCompleted)
		}
	}
	target, previous := next.ShownImages() // as status shows them (a node group's rollback: the AMI it went to)
	for _, k := range kinds {
		at := next.UpdatedAt
		if at.IsZero() {
			at = time.Now()
		}
		n.enqueue(DetailTypeRollout, at, RolloutDetail{SchemaVersion: SchemaVersion, Event: k, Group: next.Group,
			Platform: next.Platform, Cluster: next.Cluster, Phase: next.Phase.String(), PreviousPhase: prev.Phase.String(),
			Reason: next.Reason, TargetImageID: target, PreviousImageID: previous,
			Instances: next.Instances, OnTarget: next.OnTarget, At: at.UTC(), AgentVersion: n.agent})
	}
}

// AMIRejected implements model.AMIRejectionObserver: it queues a "Rollout State Change" event of kind
// ami-rejected.
func (n *Notifier) AMIRejected(t model.Target, r state.Rollout, rej model.AMIRejection) {
	n.mu.Lock()
	n.remember(t.Group, t.Platform, t.Cluster)
	n.mu.Unlock()
	at := r.UpdatedAt
	if at.IsZero() {
		at = time.Now()
	}
	n.enqueue(DetailTypeRollout, at, RolloutDetail{SchemaVersion: SchemaVersion, Event: EventAMIRejected, Group: r.Group,
		Platform: t.Platform, Cluster: t.Cluster, Phase: r.Phase.String(), PreviousPhase: r.Phase.String(), Reason: r.Reason,
		TargetImageID: rej.ImageID, PreviousImageID: r.PreviousImageID, Instances: r.Instances, OnTarget: r.OnTarget,
		At: at.UTC(), RejectReason: rej.Reason})
}

var _ model.AMIRejectionObserver = (*Notifier)(nil)

// Alert implements model.AlertObserver: it queues a "Patch Agent Alert" event.
func (n *Notifier) Alert(a model.Alert) {
	n.mu.Lock()
	n.remember(a.Target.Group, a.Target.Platform, a.Target.Cluster)
	t := n.targets[a.Target.Group]
	n.mu.Unlock()
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	n.enqueue(DetailTypeAlert, at, AlertDetail{SchemaVersion: AlertSchemaVersion, Alert: a.Kind, Group: a.Target.Group,
		Platform: t.platform, Cluster: t.cluster, Detail: a.Detail, Who: a.Who, ImageID: a.ImageID, At: at.UTC(), AgentVersion: n.agent})
}

var _ model.AlertObserver = (*Notifier)(nil)

// TargetObserved implements model.Observer: it only learns the group's platform and cluster.
func (n *Notifier) TargetObserved(t model.Target, _ model.GroupView, _ state.Rollout, _ *model.ResolvedAMI) {
	n.mu.Lock()
	n.remember(t.Group, t.Platform, t.Cluster)
	n.mu.Unlock()
}

// LifecycleActionCompleted implements model.Observer: it queues a "Lifecycle Action Completed" event.
func (n *Notifier) LifecycleActionCompleted(h state.Hook, drain time.Duration) {
	n.mu.Lock()
	t := n.targets[h.Group]
	n.mu.Unlock()
	at := h.CompletedAt
	if at.IsZero() {
		at = time.Now()
	}
	n.enqueue(DetailTypeLifecycle, at, LifecycleDetail{SchemaVersion: SchemaVersion, Group: h.Group, Platform: t.platform,
		Cluster: t.cluster, InstanceID: h.InstanceID, LifecycleHookName: h.HookName, LifecycleTransition: h.Transition,
		Result: h.Result, Note: h.Note, DrainSeconds: drain.Seconds(), At: at.UTC(), AgentVersion: n.agent})
}

// LifecycleMessageRejected implements model.Observer: it queues a "Lifecycle Message Rejected" event,
// except for messages of groups the agent does not manage (field case C3: routine on a shared queue; they are
// counted by the metrics only).
func (n *Notifier) LifecycleMessageRejected(r model.Rejection) {
	if r.Reason == model.RejectGroupNotManaged {
		return
	}
	at := r.At
	if at.IsZero() {
		at = time.Now()
	}
	n.enqueue(DetailTypeRejected, at, RejectedDetail{SchemaVersion: RejectedSchemaVersion, Reason: r.Reason, Detail: r.Detail,
		Group: r.Action.GroupName, Platform: r.Platform, Cluster: r.Cluster, InstanceID: r.Action.InstanceID,
		LifecycleHookName: r.Action.HookName, LifecycleTransition: r.Action.Transition, At: at.UTC()})
}

// remember records a group's platform and cluster; the caller holds n.mu.
func (n *Notifier) remember(group, platform, cluster string) {
	t := n.targets[group]
	if platform != "" {
		t.platform = platform
	}
	if cluster != "" {
		t.cluster = cluster
	}
	n.targets[group] = t
}

// enqueue queues one event without waiting: a full buffer drops it.
func (n *Notifier) enqueue(detailType string, at time.Time, detail any) {
	body, err := json.Marshal(detail)
	if err != nil { // plain structs: cannot happen
		n.log.Error("encoding notification failed", zap.String(fieldDetailType, detailType), zap.Error(err))
		return
	}
	e := ebtypes.PutEventsRequestEntry{Source: aws.String(Source), DetailType: aws.String(detailType),
		Detail: aws.String(string(body)), EventBusName: aws.String(n.bus), Time: aws.Time(at)}
	select {
	case n.queue <- e:
	default:
		n.dropped.Add(1)
		n.log.Warn("notification buffer full; event dropped", zap.String(fieldDetailType, detailType), zap.String(fieldDetail, string(body)))
	}
}

// Run sends queued events until ctx is cancelled, then sends what is still queued (for at most 10 s) and
// returns nil. A call in flight when ctx is cancelled is finished, not abandoned. Start at most one Run.
func (n *Notifier) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownFlushLimit)
			defer cancel()
			if err := n.Flush(flush); err != nil {
				n.log.Warn("sending notifications on shutdown failed", zap.Error(err))
			}
			return nil
		case e := <-n.queue:
			batch := n.fill([]ebtypes.PutEventsRequestEntry{e})
			send, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
			if err := n.send(send, batch); err != nil {
				n.log.Warn("sending notifications failed; they are not retried", zap.Error(err))
			}
			cancel()
		}
	}
}

// Flush sends every event queued now, in batches, and returns the joined errors. Use it where Run is not
// running (tests, the demo) or after it returned.
func (n *Notifier) Flush(ctx context.Context) error {
	var errs []error
	for {
		select {
		case e := <-n.queue:
			if err := n.send(ctx, n.fill([]ebtypes.PutEventsRequestEntry{e})); err != nil {
				errs = append(errs, err)
			}
		default:
			return errors.Join(errs...)
		}
	}
}

// fill adds queued events to batch, without waiting, up to the PutEvents limits.
func (n *Notifier) fill(batch []ebtypes.PutEventsRequestEntry) []ebtypes.PutEventsRequestEntry {
	size := entrySize(batch[0])
	for len(batch) < MaxEntriesPerCall {
		select {
		case e := <-n.queue:
			batch = append(batch, e)
			if size += entrySize(e); size >= maxBatchBytes {
				return batch
			}
		default:
			return batch
		}
	}
	return batch
}

func entrySize(e ebtypes.PutEventsRequestEntry) int {
	return len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail)) + 64
}

// send makes one PutEvents call; failed entries are logged one by one and counted.
func (n *Notifier) send(ctx context.Context, batch []ebtypes.PutEventsRequestEntry) error {
	out, err := n.api.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: batch})
	if err != nil {
		n.failed.Add(int64(len(batch)))
		return fmt.Errorf("putting %d event(s) on bus %s: %w", len(batch), n.bus, err)
	}
	var failed int
	for i, r := range out.Entries {
		if r.ErrorCode == nil || i >= len(batch) {
			continue
		}
		failed++
		n.log.Warn("EventBridge rejected a notification", zap.String(logging.Error, aws.ToString(r.ErrorCode)+": "+aws.ToString(r.ErrorMessage)),
			zap.String(fieldDetailType, aws.ToString(batch[i].DetailType)), zap.String(fieldDetail, aws.ToString(batch[i].Detail)))
	}
	if failed == 0 && out.FailedEntryCount > 0 {
		failed = int(out.FailedEntryCount)
	}
	n.failed.Add(int64(failed))
	n.sent.Add(int64(len(batch) - failed))
	if failed > 0 {
		return fmt.Errorf("EventBridge rejected %d of %d event(s) on bus %s", failed, len(batch), n.bus)
	}
	return nil
}
