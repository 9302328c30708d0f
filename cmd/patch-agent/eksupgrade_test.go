//go:build !nodemo

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	awseks "github.com/aws/aws-sdk-go-v2/service/eks"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/operate"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/eksupgrade"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/schema"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// simUpgrade points `patch-agent eks upgrade` at the eks-upgrade demo's simulated account (cluster demo-eks on
// 1.30) for the test, and returns the account and an empty state file.
func simUpgrade(t *testing.T) (*sim.Account, string) {
	t.Helper()
	return simUpgradeGroups(t, false)
}

// simUpgradeGroups is simUpgrade, with the account's Auto Scaling groups (the self-managed node group) when
// groups is set.
func simUpgradeGroups(t *testing.T, groups bool) (*sim.Account, string) {
	t.Helper()
	a, err := demo.EKSUpgradeAccount()
	require.NoError(t, err)
	prev := operate.EKSUpgradeEnvironment
	operate.EKSUpgradeEnvironment = operate.EKSUpgradeEnv{Clock: a.Clock(),
		// No Auto Scaling groups: the demo's self-managed node group waits for the agent's rollout, which these
		// CLI runs do not play (the workflow's tests and the demo run the agent beside the workflow). For the
		// same reason the managed node group is shown to them without its opt-in tag (its step is
		// ActionRequired instead of waiting for the agent's managed-node-group rollout).
		Connect: func(context.Context, string) (awsapi.EKSUpgrade, awsapi.GroupReader, error) {
			if groups {
				return untaggedNodegroups{a.EKSUpgrade()}, a.AutoScaling(), nil
			}
			return untaggedNodegroups{a.EKSUpgrade()}, nil, nil
		},
		Wait: func(ctx context.Context, d time.Duration) error {
			a.Advance(d)
			return ctx.Err()
		},
		Backoff: eksdrain.Backoff{Base: 15 * time.Second, Cap: time.Minute}.Delay,
	}
	t.Cleanup(func() { operate.EKSUpgradeEnvironment = prev })
	file := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, cli.SaveSnapshot(file, state.NewMemory()))
	return a, file
}

// untaggedNodegroups hides the managed node groups' tags: to the workflow they are not opted in.
type untaggedNodegroups struct{ awsapi.EKSUpgrade }

func (e untaggedNodegroups) DescribeNodegroup(ctx context.Context, in *awseks.DescribeNodegroupInput, o ...func(*awseks.Options)) (*awseks.DescribeNodegroupOutput, error) {
	out, err := e.EKSUpgrade.DescribeNodegroup(ctx, in, o...)
	if err == nil && out.Nodegroup != nil {
		ng := *out.Nodegroup
		ng.Tags = nil
		out = &awseks.DescribeNodegroupOutput{Nodegroup: &ng}
	}
	return out, err
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee cli.ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return 1
}

func upgradeStatus(t *testing.T, file string) eksupgrade.Summary {
	t.Helper()
	res := run(t, "eks", "upgrade", "status", "--cluster", testworld.EKSCluster, "-o", "json", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	var s eksupgrade.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &s), res.stdout)
	return s
}

func TestEKSUpgradeDryRunPrintsThePlanAndWritesNothing(t *testing.T) {
	a, file := simUpgradeGroups(t, true)
	before, err := os.ReadFile(file)
	require.NoError(t, err)
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--dry-run", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	for _, want := range []string{"EKS upgrade of demo-eks: 1.30 -> 1.31 (dry run: nothing was changed)", "control-plane", "vpc-cni",
		"v1.19.0-eksbuild.1", "managed-nodegroup", "self-managed-nodegroup", "CHECK", "insight Kubelet version skew"} {
		require.Contains(t, res.stdout, want)
	}
	after, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "--dry-run writes nothing")
	require.Empty(t, a.EKSUpdates(testworld.EKSCluster))
}

func TestEKSUpgradeDryRunOfAFailingPreflightExitsOne(t *testing.T) {
	_, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.32", "--dry-run", "--state-file", file)
	require.Equal(t, 1, exitCode(t, res.err))
	require.Contains(t, res.stdout, "exactly one minor version above it (1.31)")
}

func TestEKSUpgradeWaitsForApproveThenResumesFromTheStateFile(t *testing.T) {
	a, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--state-file", file)
	require.Equal(t, operate.ExitWaiting, exitCode(t, res.err), "%v", res.err)
	require.Contains(t, res.err.Error(), "patch-agent approve eks:demo-eks")
	require.Contains(t, res.stdout, "preflight passed")
	require.Equal(t, state.WorkflowWaiting, upgradeStatus(t, file).Phase)
	require.Empty(t, a.EKSUpdates(testworld.EKSCluster))

	res = run(t, "approve", "eks:"+testworld.EKSCluster, "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "is approved by tester@")
	require.Contains(t, res.stdout, "patch-agent eks upgrade --cluster demo-eks --to 1.31")

	res = run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "UpdateClusterVersion of demo-eks to 1.31: requested")
	require.Contains(t, res.stdout, "phase Completed")

	s := upgradeStatus(t, file)
	require.Equal(t, state.WorkflowCompleted, s.Phase)
	require.Empty(t, s.RunningBy, "the lease is given back")
	for _, st := range s.Steps {
		if st.Kind == eksupgrade.KindManagedNodegroup { // not opted in to these agent-less runs (untaggedNodegroups)
			require.Equal(t, state.StepStatusActionRequired, st.Status, "%s %s", st.Kind, st.Name)
			continue
		}
		require.Equal(t, state.StepStatusCompleted, st.Status, "%s %s", st.Kind, st.Name)
	}

	res = run(t, "history", "eks:"+testworld.EKSCluster, "--state-file", file, "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var doc operator.HistoryDocument
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	hist := doc.Entries
	require.GreaterOrEqual(t, len(hist), 15)
	require.Equal(t, "approved", hist[2].Event)
	require.Contains(t, hist[2].Detail, "by tester@")
}

func TestEKSUpgradeWithApproveAndJSONPrintsOnlyTheSummaryOnStdout(t *testing.T) {
	_, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--yes", "-o", "json", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	var s eksupgrade.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &s), res.stdout)
	require.Equal(t, state.WorkflowCompleted, s.Phase)
	require.Len(t, s.Steps, 7, "preflight, approval, control plane, 3 add-ons, managed node group")
	require.Contains(t, res.stderr, "preflight passed", "progress lines go to stderr")
	require.Contains(t, res.stdout, `"detail": "1.30 -> 1.31"`, "no HTML escaping")
}

func TestEKSUpgradeFailedControlPlaneExitsOneAndRetryFinishes(t *testing.T) {
	a, file := simUpgrade(t)
	a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: testworld.EKSCluster})
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--yes", "--state-file", file)
	require.Equal(t, 1, exitCode(t, res.err))
	require.Contains(t, res.err.Error(), "halted: failed: control-plane demo-eks")
	require.Contains(t, res.err.Error(), "--retry")

	res = run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--retry", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Equal(t, state.WorkflowCompleted, upgradeStatus(t, file).Phase)
}

func TestEKSUpgradeStatusTableShowsTheCurrentStep(t *testing.T) {
	_, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--state-file", file)
	require.Equal(t, operate.ExitWaiting, exitCode(t, res.err))
	res = run(t, "eks", "upgrade", "status", "--cluster", testworld.EKSCluster, "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "phase Waiting, step approval demo-eks")
	require.Contains(t, res.stdout, "reason: approval: waiting for `patch-agent approve eks:demo-eks`")
}

func TestEKSUpgradeUsageErrors(t *testing.T) {
	_, file := simUpgrade(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "1.31"}, "--cluster is required"},
		{[]string{"--cluster", "demo-eks"}, "--to is required"},
		{[]string{"--cluster", "demo-eks", "--to", "1.31", "--dry-run", "--yes"}, "--dry-run changes nothing"},
		{[]string{"--cluster", "demo-eks", "--status", "--retry"}, "--status only reads"},
		{[]string{"--cluster", "demo-eks", "--to", "131"}, "not a Kubernetes version"},
		{[]string{"--cluster", "nope", "--status"}, "no upgrade workflow for EKS cluster nope"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res := run(t, append(append([]string{"eks", "upgrade"}, tc.args...), "--state-file", file)...)
			require.ErrorContains(t, res.err, tc.want)
		})
	}
}

func TestDemoEKSUpgradeScenarioEndsWithEveryStepCompleted(t *testing.T) {
	res := run(t, "demo", "--scenario", demo.EKSUpgradeScenario, "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var s demo.EKSUpgradeSummary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &s), "--json prints only the summary")
	require.Equal(t, demo.EKSUpgradeScenario, s.Scenario)
	require.Equal(t, state.WorkflowCompleted, s.Phase)
	require.Equal(t, "1.30", s.From)
	require.Equal(t, "1.31", s.To)
	var kinds []string
	for _, st := range s.Steps {
		require.Equal(t, state.StepStatusCompleted, st.Status, "%s %s", st.Kind, st.Name)
		kinds = append(kinds, st.Kind+" "+st.Name)
	}
	require.Equal(t, []string{"preflight demo-eks", "approval demo-eks", "control-plane demo-eks", "addon vpc-cni", "addon coredns",
		"addon kube-proxy", "managed-nodegroup web", "self-managed-nodegroup demo-eks-nodes"}, kinds)
	require.Equal(t, 5, s.Updates)
	// The self-managed node group's step completed only once the agent's rollout had every node on the
	// Kubernetes 1.31 AMI.
	sm := s.Steps[len(s.Steps)-1]
	require.NotNil(t, sm.Nodes)
	require.Equal(t, state.NodeProgress{Phase: state.PhaseCompleted, OnTarget: 3, Instances: 3, TargetImageID: demo.UpgradeImage,
		Source: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id", OnVersion: true}, *sm.Nodes)
}

func TestDemoEKSUpgradeScenarioTableAndStateFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "demo.json")
	res := run(t, "demo", "--scenario", demo.EKSUpgradeScenario, "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "operator: patch-agent approve eks:demo-eks")
	require.Contains(t, res.stdout, "upgrade of demo-eks to 1.31 completed")
	require.Contains(t, res.stdout, "phase Completed")
	res = run(t, "eks", "upgrade", "status", "--cluster", testworld.EKSCluster, "--state-file", file, "-o", "json")
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, `"phase": "Completed"`)
}

func TestEKSUpgradeTwoPersonRuleRefusesTheRequestersApproval(t *testing.T) {
	a, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--two-person", "--yes", "--who", "alice", "--state-file", file)
	require.Equal(t, operate.ExitWaiting, exitCode(t, res.err), "%v", res.err)
	require.Contains(t, res.err.Error(), "two-person rule: alice requested the plan")

	res = run(t, "approve", "eks:"+testworld.EKSCluster, "--who", "alice", "--state-file", file)
	require.Error(t, res.err)
	require.ErrorIs(t, res.err, eksupgrade.ErrSameApprover)
	require.Empty(t, a.EKSUpdates(testworld.EKSCluster))

	res = run(t, "approve", "eks:"+testworld.EKSCluster, "--who", "bob", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	res = run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--who", "alice", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Equal(t, state.WorkflowCompleted, upgradeStatus(t, file).Phase)
}

// `eks upgrade --status -o json` is a machine-readable document like status and history: it
// starts with schemaVersion (schema.Version), and its shape is held by a golden file.
func TestGoldenEKSUpgradeStatusJSONCarriesSchemaVersion(t *testing.T) {
	_, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--who", "alice", "--state-file", file)
	require.Equal(t, operate.ExitWaiting, exitCode(t, res.err), "%v", res.err)
	res = run(t, "eks", "upgrade", "status", "--cluster", testworld.EKSCluster, "-o", "json", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Equal(t, float64(schema.Version), doc["schemaVersion"])
	require.True(t, strings.HasPrefix(res.stdout, "{\n  \"schemaVersion\": "), "schemaVersion comes first")
	goldenFile(t, filepath.Join("testdata", "eks-upgrade-status.json.golden"), res.stdout)
}

// `approve eks:CLUSTER` of a completed upgrade is refused (exit 1) with what to do instead.
func TestEKSUpgradeApproveOfACompletedUpgradeIsRefused(t *testing.T) {
	_, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", testworld.EKSCluster, "--to", "1.31", "--yes", "--who", "alice", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	res = run(t, "approve", "eks:"+testworld.EKSCluster, "--who", "bob", "--state-file", file)
	require.ErrorIs(t, res.err, eksupgrade.ErrNothingToApprove)
	require.Equal(t, 1, exitCode(t, res.err))
	require.ErrorContains(t, res.err, "completed at")
	require.Equal(t, "alice", upgradeStatus(t, file).ApprovedBy, "the record is unchanged")
}

func TestApproveOfAnEKSSubjectWithoutAClusterIsAUsageError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	for _, subject := range []string{"eks:", "eks: "} {
		res := run(t, "approve", subject, "--who", "carol", "--state-file", file)
		require.EqualError(t, res.err, fmt.Sprintf("%q names no cluster: an EKS upgrade plan is approved as eks:CLUSTER (e.g. eks:prod)", subject))
		require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err))
	}
}
