package state

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"
	"weak"
)

// The record of an EKS cluster version upgrade (`patch-agent eks upgrade`, internal/eksupgrade): one per
// cluster, pk "upgrade#<cluster>" sk "workflow" in the DynamoDB table, rewritten with one conditional write
// (on the version attribute, like PutRollout) per transition. It is not part of the Store interface: the
// memory and DynamoDB stores implement GetWorkflow and PutWorkflow here, and the upgrade declares the
// interface it consumes.

// WorkflowPhase is the top-level state of an upgrade workflow.
type WorkflowPhase string

const (
	WorkflowPreflight WorkflowPhase = "Preflight" // the checks run; nothing changed yet
	WorkflowWaiting   WorkflowPhase = "Waiting"   // approval or a pause holds the next step; Reason says which
	WorkflowRunning   WorkflowPhase = "Running"   // steps are being carried out (see Current)
	WorkflowCompleted WorkflowPhase = "Completed" // every step done; waits for the next upgrade
	WorkflowHalted    WorkflowPhase = "Halted"    // a check or an update failed; nothing after it is done
)

// StepStatus is the progress of one workflow step.
type StepStatus string

const (
	StepStatusPending StepStatus = "Pending"
	// StepStatusRequested: the step's ClientRequestToken is written and its update call is about to be (or
	// was) made; a resumed run looks for the update first, then calls again with the same token.
	StepStatusRequested StepStatus = "Requested"
	// StepStatusInProgress: EKS accepted the update (UpdateID); tracked with DescribeUpdate.
	StepStatusInProgress StepStatus = "InProgress"
	StepStatusCompleted  StepStatus = "Completed"
	StepStatusFailed     StepStatus = "Failed"
	// StepStatusSkipped: nothing to do (already at the target version).
	StepStatusSkipped StepStatus = "Skipped"
	// StepStatusActionRequired: the workflow cannot do it; Detail says what an operator must do.
	StepStatusActionRequired StepStatus = "ActionRequired"
)

// Done reports whether the step needs no further work by the workflow.
func (s StepStatus) Done() bool {
	switch s {
	case StepStatusCompleted, StepStatusSkipped, StepStatusActionRequired:
		return true
	}
	return false
}

// WorkflowStep is one step of an upgrade workflow: the preflight, the approval, the control plane, one
// add-on, or one node group.
type WorkflowStep struct {
	// Kind is preflight, approval, control-plane, addon, managed-nodegroup or self-managed-nodegroup.
	Kind string `json:"kind" dynamodbav:"kind"`
	// Name is the resource: the cluster, the add-on, the managed node group or the Auto Scaling group.
	Name string `json:"name" dynamodbav:"name"`
	// From and To are the versions (Kubernetes version, or add-on version) before and after the step.
	From   string     `json:"from,omitempty" dynamodbav:"from,omitempty"`
	To     string     `json:"to,omitempty" dynamodbav:"to,omitempty"`
	Status StepStatus `json:"status" dynamodbav:"status"`
	// Token is the ClientRequestToken of the step's update call, written before the call so that a repeat
	// after a crash is the same request.
	Token string `json:"clientRequestToken,omitempty" dynamodbav:"token,omitempty"`
	// UpdateID is the EKS update the call started (DescribeUpdate).
	UpdateID string `json:"updateId,omitempty" dynamodbav:"updateId,omitempty"`
	// EarlierUpdateIDs are the updates of the step's earlier, failed attempts (written by --retry before the
	// new attempt's call): a resumed run never takes one of them for the new attempt's update.
	EarlierUpdateIDs []string `json:"earlierUpdateIds,omitempty" dynamodbav:"earlierUpdateIds,omitempty"`
	// By is who started the step (or approved, for the approval step).
	By          string    `json:"by,omitempty" dynamodbav:"by,omitempty"`
	StartedAt   time.Time `json:"startedAt,omitzero" dynamodbav:"startedAt,omitempty"`
	CompletedAt time.Time `json:"completedAt,omitzero" dynamodbav:"completedAt,omitempty"`
	// Detail: the errors of a failed update, why a step was skipped, or how a self-managed node group moves.
	Detail string `json:"detail,omitempty" dynamodbav:"detail,omitempty"`
	// Action is what an operator must do for the step to take effect ("" when nothing): a self-managed node
	// group whose AMI source does not follow the control plane, a managed node group with a custom AMI.
	Action string `json:"action,omitempty" dynamodbav:"action,omitempty"`
	// Nodes is the progress of the agent's rollout of a self-managed node group, as the step last read its
	// rollout record (nil before the hand-over, or for other kinds).
	Nodes *NodeProgress `json:"nodes,omitempty" dynamodbav:"nodes,omitempty"`
}

// NodeProgress is how far the agent's rollout of a self-managed node group is (its rollout record).
type NodeProgress struct {
	// Phase is the rollout record's phase ("" when the group has no record yet).
	Phase Phase `json:"phase" dynamodbav:"phase"`
	// OnTarget of Instances in-service instances run TargetImageID.
	OnTarget  int `json:"onTarget" dynamodbav:"onTarget"`
	Instances int `json:"instances" dynamodbav:"instances"`
	// TargetImageID is the AMI the rollout moves the group to, resolved from Source (an AMI parameter).
	TargetImageID string `json:"targetImageId,omitempty" dynamodbav:"targetImageId,omitempty"`
	Source        string `json:"source,omitempty" dynamodbav:"source,omitempty"`
	// OnVersion reports whether Source names the step's target Kubernetes version.
	OnVersion bool `json:"onVersion" dynamodbav:"onVersion"`
	// Reason is the rollout record's reason (a gate it waits for, an EKS update in progress); set for managed
	// node groups only.
	Reason string `json:"reason,omitempty" dynamodbav:"reason,omitempty"`
}

// PreflightCheck is the result of one preflight check.
type PreflightCheck struct {
	Name string `json:"name" dynamodbav:"name"`
	// Result is pass, warn or fail; any fail halts the workflow before anything is changed.
	Result string `json:"result" dynamodbav:"result"`
	Detail string `json:"detail,omitempty" dynamodbav:"detail,omitempty"`
}

// Workflow is the persisted record of one EKS cluster's version upgrade.
type Workflow struct {
	Cluster string `json:"cluster" dynamodbav:"cluster"`
	// From is the control plane's Kubernetes version when the workflow started; To the target ("1.31").
	From   string        `json:"from,omitempty" dynamodbav:"from,omitempty"`
	To     string        `json:"to" dynamodbav:"to"`
	Phase  WorkflowPhase `json:"phase" dynamodbav:"phase"`
	Reason string        `json:"reason,omitempty" dynamodbav:"reason,omitempty"`
	// Current is the index in Steps of the step being worked on (len(Steps) once all are done).
	Current int            `json:"current" dynamodbav:"current"`
	Steps   []WorkflowStep `json:"steps" dynamodbav:"steps"`
	// Checks are the results of the last preflight.
	Checks []PreflightCheck `json:"checks,omitempty" dynamodbav:"checks,omitempty"`

	RequestedBy string    `json:"requestedBy,omitempty" dynamodbav:"requestedBy,omitempty"`
	ApprovedBy  string    `json:"approvedBy,omitempty" dynamodbav:"approvedBy,omitempty"`
	ApprovedAt  time.Time `json:"approvedAt,omitzero" dynamodbav:"approvedAt,omitempty"`
	// TwoPersonRule (`eks upgrade --two-person`): the plan is approved only by someone other than RequestedBy.
	TwoPersonRule bool `json:"twoPersonRule,omitempty" dynamodbav:"twoPersonRule,omitempty"`
	// RestartFargate (`eks upgrade --restart-fargate`): the workloads of Fargate pods are restarted after the
	// control plane moved. UpdateSelfManagedAddons (`--update-self-managed-addons`): aws-node, coredns and
	// kube-proxy that are not EKS add-ons are updated in place.
	RestartFargate          bool `json:"restartFargate,omitempty" dynamodbav:"restartFargate,omitempty"`
	UpdateSelfManagedAddons bool `json:"updateSelfManagedAddons,omitempty" dynamodbav:"updateSelfManagedAddons,omitempty"`

	// LeaseOwner is the invocation working on the workflow until LeaseExpires; another is refused until then.
	LeaseOwner   string    `json:"leaseOwner,omitempty" dynamodbav:"leaseOwner,omitempty"`
	LeaseExpires time.Time `json:"leaseExpires,omitzero" dynamodbav:"leaseExpires,omitempty"`

	StartedAt time.Time `json:"startedAt,omitzero" dynamodbav:"startedAt,omitempty"`
	UpdatedAt time.Time `json:"updatedAt,omitzero" dynamodbav:"updatedAt,omitempty"`
	// PendingHistory are the history entries of the transition this write records (an outbox): appended to
	// the history right after the write, and appended again by a run that resumes the workflow when the
	// history does not hold them yet, so a crash between the two writes loses no entry of the audit trail.
	PendingHistory []HistoryEntry `json:"pendingHistory,omitempty" dynamodbav:"pendingHistory,omitempty"`
	// Transitions counts the transitions written so far.
	Transitions int `json:"transitions" dynamodbav:"transitions"`
	// Version is the optimistic-concurrency counter the conditional writes compare.
	Version int64 `json:"version" dynamodbav:"version"`
}

// Clone returns a deep copy of w: its slices are not shared.
func (w Workflow) Clone() Workflow {
	w.Steps = append([]WorkflowStep(nil), w.Steps...)
	w.Checks = append([]PreflightCheck(nil), w.Checks...)
	w.PendingHistory = append([]HistoryEntry(nil), w.PendingHistory...)
	return w
}

const (
	pkUpgradePrefix = "upgrade#"
	skWorkflow      = "workflow"
)

// WorkflowKey returns the primary key (pk, sk) of a cluster's upgrade workflow record.
func WorkflowKey(cluster string) (pk, sk string) { return pkUpgradePrefix + cluster, skWorkflow }

// GetWorkflow returns the upgrade workflow of cluster with a strongly consistent read, or ErrNotFound.
func (d *DynamoDB) GetWorkflow(ctx context.Context, cluster string) (Workflow, error) {
	pk, sk := WorkflowKey(cluster)
	var w Workflow
	if err := d.get(ctx, pk, sk, &w); err != nil {
		return Workflow{}, fmt.Errorf("reading upgrade workflow of %s: %w", cluster, err)
	}
	return w, nil
}

// PutWorkflow writes w if the stored record's Version equals w.Version (0 = must not exist yet) with one
// conditional PutItem, and returns the record as stored with Version incremented. ErrConflict otherwise.
func (d *DynamoDB) PutWorkflow(ctx context.Context, w Workflow) (Workflow, error) {
	if w.Cluster == "" {
		return Workflow{}, errors.New("writing upgrade workflow: cluster is empty")
	}
	stored := w.Clone()
	stored.Version = w.Version + 1
	pk, sk := WorkflowKey(w.Cluster)
	if err := d.putVersioned(ctx, pk, sk, w.Version, stored); err != nil {
		return Workflow{}, fmt.Errorf("writing upgrade workflow of %s at version %d: %w", w.Cluster, w.Version, err)
	}
	return stored.Clone(), nil
}

// workflowsByMemory holds the workflow records of each memory store beside it (keyed by a weak pointer,
// dropped with the store), guarded by the store's lock.
var workflowsByMemory sync.Map // weak.Pointer[Memory] -> map[string]Workflow

// workflowsLocked returns m's workflow records, creating the map on first use. Callers hold m.mu.
func (m *Memory) workflowsLocked() map[string]Workflow {
	key := weak.Make(m)
	if v, ok := workflowsByMemory.Load(key); ok {
		return v.(map[string]Workflow)
	}
	ws := map[string]Workflow{}
	workflowsByMemory.Store(key, ws)
	runtime.AddCleanup(m, func(k weak.Pointer[Memory]) { workflowsByMemory.Delete(k) }, key)
	return ws
}

// GetWorkflow returns the upgrade workflow of cluster, or ErrNotFound.
func (m *Memory) GetWorkflow(_ context.Context, cluster string) (Workflow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.workflowsLocked()[cluster]
	if !ok {
		return Workflow{}, fmt.Errorf("upgrade workflow of %s: %w", cluster, ErrNotFound)
	}
	return w.Clone(), nil
}

// PutWorkflow writes w conditionally on w.Version exactly like PutRollout.
func (m *Memory) PutWorkflow(_ context.Context, w Workflow) (Workflow, error) {
	if w.Cluster == "" {
		return Workflow{}, errors.New("writing upgrade workflow: cluster is empty")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ws := m.workflowsLocked()
	cur, ok := ws[w.Cluster]
	if (!ok && w.Version != 0) || (ok && cur.Version != w.Version) {
		return Workflow{}, fmt.Errorf("upgrade workflow of %s at version %d: %w", w.Cluster, w.Version, ErrConflict)
	}
	w.Version++
	ws[w.Cluster] = w.Clone()
	m.Writes++
	return w.Clone(), nil
}

// snapshotWorkflowsLocked returns m's workflow records sorted by cluster, for Save. Callers hold m.mu.
func (m *Memory) snapshotWorkflowsLocked() []Workflow {
	v, ok := workflowsByMemory.Load(weak.Make(m))
	if !ok {
		return nil
	}
	ws := v.(map[string]Workflow)
	out := make([]Workflow, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.Clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out
}

// loadWorkflows puts the workflow records of a snapshot into a new memory store; it returns one error per
// record without a cluster or appearing twice.
func (m *Memory) loadWorkflows(ws []Workflow) []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for i, w := range ws {
		table := m.workflowsLocked()
		switch _, dup := table[w.Cluster]; {
		case w.Cluster == "":
			errs = append(errs, fmt.Errorf("upgrade workflow %d has no cluster", i))
		case dup:
			errs = append(errs, fmt.Errorf("upgrade workflow of %s appears twice", w.Cluster))
		default:
			table[w.Cluster] = w.Clone()
		}
	}
	return errs
}
