package state_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/state/storetest"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

func TestMemoryWorkflowConformance(t *testing.T) {
	storetest.RunWorkflow(t, func(*testing.T) storetest.WorkflowStore { return state.NewMemory() })
}

func TestDynamoDBWorkflowConformance(t *testing.T) {
	testenv.Kumo(t)
	storetest.RunWorkflow(t, func(t *testing.T) storetest.WorkflowStore {
		client, table := newTable(t)
		return state.NewDynamoDB(client, table)
	})
}

// TestMemoryLeaseConformance and TestDynamoDBLeaseConformance run the one lease conformance test of every
// versioned record (rollout, lifecycle action, upgrade workflow) on both stores.
func TestMemoryLeaseConformance(t *testing.T) {
	storetest.RunLeases(t, func(*testing.T) storetest.WorkflowStore { return state.NewMemory() })
}

func TestDynamoDBLeaseConformance(t *testing.T) {
	testenv.Kumo(t)
	storetest.RunLeases(t, func(t *testing.T) storetest.WorkflowStore {
		client, table := newTable(t)
		return state.NewDynamoDB(client, table)
	})
}

func TestWorkflowItemIsUpgradeClusterWorkflowWithAVersion(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	s := state.NewDynamoDB(client, table)
	w, err := s.PutWorkflow(ctx, state.Workflow{Cluster: "prod", To: "1.31", Phase: state.WorkflowPreflight})
	require.NoError(t, err)
	_, err = s.PutWorkflow(ctx, w)
	require.NoError(t, err)

	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "upgrade#prod"}, "sk": &types.AttributeValueMemberS{Value: "workflow"}}})
	require.NoError(t, err)
	require.Equal(t, "2", out.Item["version"].(*types.AttributeValueMemberN).Value)
	_, expires := out.Item[state.AttrExpiresAt]
	require.False(t, expires, "a workflow record never expires")
}

func TestPutWorkflowErrorsAreClassifiedAndNameTableAndKey(t *testing.T) {
	ctx := context.Background()
	conflict := state.NewDynamoDB(failingPut{err: &smithy.GenericAPIError{Code: "ConditionalCheckFailedException"}}, "patch-agent")
	_, err := conflict.PutWorkflow(ctx, state.Workflow{Cluster: "prod", Version: 3})
	require.ErrorIs(t, err, state.ErrConflict)
	require.ErrorContains(t, err, "table patch-agent (pk upgrade#prod, sk workflow)")

	throttled := state.NewDynamoDB(failingPut{err: &smithy.GenericAPIError{Code: "ThrottlingException"}}, "patch-agent")
	_, err = throttled.PutWorkflow(ctx, state.Workflow{Cluster: "prod"})
	require.NotErrorIs(t, err, state.ErrConflict)

	_, err = throttled.PutWorkflow(ctx, state.Workflow{})
	require.ErrorContains(t, err, "cluster is empty")
	_, err = state.NewMemory().PutWorkflow(ctx, state.Workflow{})
	require.ErrorContains(t, err, "cluster is empty")
}

func TestWorkflowSurvivesASnapshot(t *testing.T) {
	ctx := context.Background()
	m := state.NewMemory()
	at := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	w, err := m.PutWorkflow(ctx, state.Workflow{Cluster: "prod", From: "1.30", To: "1.31", Phase: state.WorkflowWaiting,
		Reason: "approval", StartedAt: at, Steps: []state.WorkflowStep{{Kind: "preflight", Name: "prod", Status: state.StepStatusCompleted}}})
	require.NoError(t, err)

	var buf bytes.Buffer
	require.NoError(t, m.Save(&buf))
	loaded, err := state.LoadMemory(&buf)
	require.NoError(t, err)
	got, err := loaded.GetWorkflow(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, w.Version, got.Version, "conditional writes continue from the saved version")
	require.Equal(t, w.Steps, got.Steps)
	require.True(t, at.Equal(got.StartedAt))

	_, err = loaded.PutWorkflow(ctx, w)
	require.NoError(t, err)
}

func TestSnapshotWithoutWorkflowsHasNoWorkflowsKey(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, state.NewMemory().Save(&buf))
	require.NotContains(t, buf.String(), "workflows")
}

func TestSnapshotRejectsAWorkflowWithoutCluster(t *testing.T) {
	_, err := state.LoadMemory(bytes.NewBufferString(`{"format":"patch-agent/state-snapshot","version":1,"workflows":[{"to":"1.31"}]}`))
	require.ErrorContains(t, err, "upgrade workflow 0 has no cluster")
}
