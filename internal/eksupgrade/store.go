package eksupgrade

import (
	"context"

	"github.com/patch-agent/patch-agent/internal/state"
)

// Store is what the workflow reads and writes: its record (conditional writes on its version), the history
// of Subject(cluster) (appended, and read to append the entries a crashed run left in its record), the pause locks, and the rollout records of self-managed node groups (which AMI
// parameter their current AMI came from). *state.Memory and *state.DynamoDB implement it.
type Store interface {
	GetWorkflow(ctx context.Context, cluster string) (state.Workflow, error)
	PutWorkflow(ctx context.Context, w state.Workflow) (state.Workflow, error)
	AppendHistory(ctx context.Context, e state.HistoryEntry) error
	History(ctx context.Context, group string) ([]state.HistoryEntry, error)
	ListLocks(ctx context.Context) ([]state.Lock, error)
	GetRollout(ctx context.Context, group string) (state.Rollout, error)
	// PutRolloutWithHistory re-arms a node group's rolled-back rollout at a --retry (operator.Retry).
	PutRolloutWithHistory(ctx context.Context, r state.Rollout, history []state.HistoryEntry) (state.Rollout, error)
}

var (
	_ Store = (*state.Memory)(nil)
	_ Store = (*state.DynamoDB)(nil)
)

// Kinds of workflow steps (state.WorkflowStep.Kind).
const (
	KindPreflight            = "preflight"
	KindApproval             = "approval"
	KindControlPlane         = "control-plane"
	KindAddon                = "addon"
	KindManagedNodegroup     = "managed-nodegroup"
	KindSelfManagedNodegroup = "self-managed-nodegroup"
)

// Preflight check results (state.PreflightCheck.Result).
const (
	CheckPass = "pass"
	CheckWarn = "warn"
	CheckFail = "fail"
)
