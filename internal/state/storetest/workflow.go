package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// WorkflowStore is a store of EKS upgrade workflow records (state/workflow.go): the memory and DynamoDB
// stores implement it beside state.Store.
type WorkflowStore interface {
	state.Store
	GetWorkflow(ctx context.Context, cluster string) (state.Workflow, error)
	PutWorkflow(ctx context.Context, w state.Workflow) (state.Workflow, error)
}

var (
	_ WorkflowStore = (*state.Memory)(nil)
	_ WorkflowStore = (*state.DynamoDB)(nil)
)

// RunWorkflow runs the conformance suite of the workflow records: missing records, conditional writes on the
// version (create, stale version, concurrent writers from one read), round trips of every field, no shared
// memory, and independence from the rollout record of the same name. newStore must return a new, empty store
// for each subtest.
func RunWorkflow(t *testing.T, newStore func(t *testing.T) WorkflowStore) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s WorkflowStore)
	}{
		{"missing workflow is ErrNotFound", testMissingWorkflow},
		{"workflow put at version 0 creates version 1; a second create conflicts", testWorkflowCreate},
		{"workflow put with a stale version conflicts and changes nothing", testWorkflowStale},
		{"workflow writers racing from one read: exactly one wins", testWorkflowRace},
		{"workflow round trip keeps every field", testWorkflowRoundTrip},
		{"workflow returned by the store does not share memory with it", testWorkflowNoAliasing},
		{"workflow and rollout of one name do not see each other", testWorkflowBesideRollout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// fullWorkflow returns a workflow with every field set (requireAllFieldsSet proves it), Version 0.
func fullWorkflow(cluster string) state.Workflow {
	return state.Workflow{
		Cluster: cluster,
		From:    "1.30",
		To:      "1.31",
		Phase:   state.WorkflowRunning,
		Reason:  "paused (global) by alice",
		Current: 2,
		Steps: []state.WorkflowStep{
			{Kind: "preflight", Name: cluster, From: "1.30", To: "1.31", Status: state.StepStatusCompleted, Token: "t-0",
				UpdateID: "-", EarlierUpdateIDs: []string{"0a1b2c3d-0000-4222-8333-444455556666"}, By: "alice", StartedAt: at, CompletedAt: at.Add(1e9), Detail: "4 checks", Action: "none",
				Nodes: &state.NodeProgress{Phase: state.PhaseReplacing, OnTarget: 1, Instances: 3, TargetImageID: "ami-0b", Source: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id", OnVersion: true, Reason: "AMI refused: ami-0b is deregistered"}},
			{Kind: "control-plane", Name: cluster, From: "1.30", To: "1.31", Status: state.StepStatusInProgress,
				Token: "patch-agent-1", UpdateID: "0a1b2c3d-1111-4222-8333-444455556666", By: "alice", StartedAt: at.Add(2e9)},
		},
		Checks: []state.PreflightCheck{{Name: "insight Kubelet version skew", Result: "pass", Detail: "PASSING"}},
		PendingHistory: []state.HistoryEntry{{Group: "eks:" + cluster, At: at.Add(5e9), Event: "control-plane-started", PreviousImage: "-",
			NewImage: "-", Source: "-", SourceVersion: 1, Detail: "update 0a1b2c3d"}},
		RequestedBy:   "alice@host",
		ApprovedBy:    "bob@host",
		ApprovedAt:    at.Add(3e9),
		TwoPersonRule: true,
		LeaseOwner:    "alice@host/1234",
		LeaseExpires:  at.Add(120e9),
		StartedAt:     at,
		UpdatedAt:     at.Add(4e9),
		Transitions:   7,

		RestartFargate:          true,
		UpdateSelfManagedAddons: true,
	}
}

func testMissingWorkflow(t *testing.T, s WorkflowStore) {
	_, err := s.GetWorkflow(ctx(t), "no-such-cluster")
	require.ErrorIs(t, err, state.ErrNotFound)
}

func testWorkflowCreate(t *testing.T, s WorkflowStore) {
	c := ctx(t)
	put, err := s.PutWorkflow(c, state.Workflow{Cluster: "prod", To: "1.31", Phase: state.WorkflowPreflight})
	require.NoError(t, err)
	require.Equal(t, int64(1), put.Version)

	_, err = s.PutWorkflow(c, state.Workflow{Cluster: "prod", To: "1.32", Phase: state.WorkflowHalted})
	require.ErrorIs(t, err, state.ErrConflict)

	got, err := s.GetWorkflow(c, "prod")
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Version)
	require.Equal(t, "1.31", got.To)
	require.Equal(t, state.WorkflowPreflight, got.Phase)
}

func testWorkflowStale(t *testing.T, s WorkflowStore) {
	c := ctx(t)
	v1, err := s.PutWorkflow(c, state.Workflow{Cluster: "prod", To: "1.31", Phase: state.WorkflowPreflight})
	require.NoError(t, err)
	next := v1
	next.Phase = state.WorkflowRunning
	_, err = s.PutWorkflow(c, next)
	require.NoError(t, err)

	stale := v1
	stale.Phase = state.WorkflowHalted
	_, err = s.PutWorkflow(c, stale)
	require.ErrorIs(t, err, state.ErrConflict)

	phantom := state.Workflow{Cluster: "other", To: "1.31", Version: 4}
	_, err = s.PutWorkflow(c, phantom)
	require.ErrorIs(t, err, state.ErrConflict)
	_, err = s.GetWorkflow(c, "other")
	require.ErrorIs(t, err, state.ErrNotFound)

	got, err := s.GetWorkflow(c, "prod")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, state.WorkflowRunning, got.Phase)
}

func testWorkflowRace(t *testing.T, s WorkflowStore) {
	c := ctx(t)
	read, err := s.PutWorkflow(c, state.Workflow{Cluster: "prod", To: "1.31", Phase: state.WorkflowRunning})
	require.NoError(t, err)
	winners, errs := race(func(i int) (string, error) {
		w := read.Clone()
		w.LeaseOwner = fmt.Sprintf("invocation %d", i)
		_, err := s.PutWorkflow(c, w)
		return w.LeaseOwner, err
	})
	require.Len(t, winners, 1, "exactly one invocation must win the lease; errors: %v", errs)
	for _, err := range errs {
		require.ErrorIs(t, err, state.ErrConflict)
	}
	got, err := s.GetWorkflow(c, "prod")
	require.NoError(t, err)
	require.Equal(t, winners[0], got.LeaseOwner)
}

func testWorkflowRoundTrip(t *testing.T, s WorkflowStore) {
	c := ctx(t)
	want := fullWorkflow("prod")
	requireAllFieldsSet(t, want, "Version")
	for _, st := range want.Steps[:1] {
		requireAllFieldsSet(t, st)
	}
	requireAllFieldsSet(t, want.Checks[0])
	requireAllFieldsSet(t, want.PendingHistory[0])

	put, err := s.PutWorkflow(c, want)
	require.NoError(t, err)
	want.Version = 1
	requireSameWorkflow(t, want, put)

	got, err := s.GetWorkflow(c, "prod")
	require.NoError(t, err)
	requireSameWorkflow(t, want, got)

	got.Steps[1].Status = state.StepStatusCompleted
	got.Steps = append(got.Steps, state.WorkflowStep{Kind: "addon", Name: "coredns", Status: state.StepStatusPending})
	updated, err := s.PutWorkflow(c, got)
	require.NoError(t, err)
	got.Version = 2
	requireSameWorkflow(t, got, updated)
	reread, err := s.GetWorkflow(c, "prod")
	require.NoError(t, err)
	requireSameWorkflow(t, got, reread)
}

func testWorkflowNoAliasing(t *testing.T, s WorkflowStore) {
	c := ctx(t)
	in := fullWorkflow("prod")
	put, err := s.PutWorkflow(c, in)
	require.NoError(t, err)
	in.Steps[0].Status = state.StepStatusFailed
	put.Steps[1].UpdateID = "changed-by-caller"
	put.Checks[0].Result = "fail"

	got, err := s.GetWorkflow(c, "prod")
	require.NoError(t, err)
	got.Steps[0].Detail = "changed-by-caller"

	again, err := s.GetWorkflow(c, "prod")
	require.NoError(t, err)
	want := fullWorkflow("prod")
	want.Version = 1
	requireSameWorkflow(t, want, again)
}

func testWorkflowBesideRollout(t *testing.T, s WorkflowStore) {
	c := ctx(t)
	_, err := s.PutWorkflow(c, state.Workflow{Cluster: "prod", To: "1.31"})
	require.NoError(t, err)
	_, err = s.GetRollout(c, "prod")
	require.ErrorIs(t, err, state.ErrNotFound)
	rs, err := s.ListRollouts(c)
	require.NoError(t, err)
	require.Empty(t, rs, "a workflow record is not a rollout")

	_, err = s.PutRollout(c, state.Rollout{Group: "prod", Phase: state.PhaseIdle})
	require.NoError(t, err)
	w, err := s.GetWorkflow(c, "prod")
	require.NoError(t, err)
	require.Equal(t, int64(1), w.Version)
}

func requireSameWorkflow(t *testing.T, want, got state.Workflow) {
	t.Helper()
	requireSameTimes(t, want, got)
	for i := range min(len(want.Steps), len(got.Steps)) {
		requireSameTimes(t, want.Steps[i], got.Steps[i])
	}
	for i := range min(len(want.PendingHistory), len(got.PendingHistory)) {
		requireSameTimes(t, want.PendingHistory[i], got.PendingHistory[i])
	}
	require.Equal(t, normalizeWorkflow(want), normalizeWorkflow(got))
}

// normalizeWorkflow is normalize for a workflow and the times inside its steps; nil and empty slices compare
// equal (a store may return either for none).
func normalizeWorkflow(w state.Workflow) state.Workflow {
	w = normalize(w)
	steps := make([]state.WorkflowStep, 0, len(w.Steps))
	for _, s := range w.Steps {
		steps = append(steps, normalize(s))
	}
	w.Steps = steps
	w.Checks = append([]state.PreflightCheck{}, w.Checks...)
	pending := make([]state.HistoryEntry, 0, len(w.PendingHistory))
	for _, e := range w.PendingHistory {
		pending = append(pending, normalize(e))
	}
	w.PendingHistory = pending
	return w
}
