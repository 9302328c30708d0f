package state_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

// countingAPI counts the requests a store makes, by operation ("Query kind-index" for a Query of an index).
type countingAPI struct {
	state.DynamoDBAPI
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingAPI) count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[op]++
}

func (c *countingAPI) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.count("Query " + aws.ToString(in.IndexName))
	return c.DynamoDBAPI.Query(ctx, in, o...)
}

func (c *countingAPI) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.count(strings.TrimSpace("Scan " + aws.ToString(in.IndexName)))
	return c.DynamoDBAPI.Scan(ctx, in, o...)
}

func TestListRolloutsAndLocksQueryTheIndexAndNeverScan(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	api := &countingAPI{DynamoDBAPI: client}
	s := state.NewDynamoDB(api, table)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, g := range []string{"c", "a", "b"} {
		r, err := s.PutRollout(ctx, state.Rollout{Group: g, Phase: state.PhaseIdle})
		require.NoError(t, err)
		_, err = s.PutRolloutWithHistory(ctx, r, []state.HistoryEntry{{Group: g, At: at, Event: "detected"}, {Group: g, At: at.Add(time.Second), Event: "completed"}})
		require.NoError(t, err)
	}
	for i := range 20 { // lifecycle actions never handled again: a Scan would read them every tick
		_, err := s.PutHook(ctx, state.Hook{Token: "tok-" + strconv.Itoa(i), Group: "a", State: state.HookCompleted})
		require.NoError(t, err)
	}
	require.NoError(t, s.PutLock(ctx, state.Lock{Group: "b", Reason: "incident", Since: at}))
	require.NoError(t, s.PutLock(ctx, state.Lock{Group: state.GlobalScope, Reason: "freeze", Since: at}))
	api.calls = nil

	rs, err := s.ListRollouts(ctx)
	require.NoError(t, err)
	groups := []string{}
	for _, r := range rs {
		groups = append(groups, r.Group)
	}
	require.Equal(t, []string{"a", "b", "c"}, groups)
	locks, err := s.ListLocks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 2)
	require.Equal(t, state.GlobalScope, locks[0].Group)
	require.Equal(t, "b", locks[1].Group)
	require.Equal(t, map[string]int{"Query " + state.IndexKind: 2}, api.calls, "one Query of the index each, no Scan")

	// Both at once: one request, a Scan of the sparse index (its items are the rollouts and the locks), never
	// of the table with its history and lifecycle actions.
	api.calls = nil
	rs2, locks2, err := s.ListRolloutsAndLocks(ctx)
	require.NoError(t, err)
	require.Equal(t, rs, rs2)
	require.Equal(t, locks, locks2)
	require.Equal(t, map[string]int{"Scan " + state.IndexKind: 1}, api.calls, "one Scan of the index")
}

// TestBackfillIndexesRecordsWrittenBeforeTheIndex: a rollout and a group pause written by an earlier version
// (no kind attribute) are invisible to the index until Backfill, which is what keeps a paused group paused
// across the upgrade.
func TestBackfillIndexesRecordsWrittenBeforeTheIndex(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	s := state.NewDynamoDB(client, table)
	state.SetPageSize(s, 2)
	old := func(pk, sk string, attrs map[string]types.AttributeValue) {
		attrs["pk"] = &types.AttributeValueMemberS{Value: pk}
		attrs["sk"] = &types.AttributeValueMemberS{Value: sk}
		_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: attrs})
		require.NoError(t, err)
	}
	old("target#legacy", "rollout", map[string]types.AttributeValue{"group": &types.AttributeValueMemberS{Value: "legacy"},
		"phase": &types.AttributeValueMemberS{Value: "Replacing"}, "version": &types.AttributeValueMemberN{Value: "7"}})
	old("target#legacy", "lock", map[string]types.AttributeValue{"group": &types.AttributeValueMemberS{Value: "legacy"},
		"reason": &types.AttributeValueMemberS{Value: "incident"}})
	old("hook#tok", "hook", map[string]types.AttributeValue{"token": &types.AttributeValueMemberS{Value: "tok"}})
	_, err := s.PutRollout(ctx, state.Rollout{Group: "new", Phase: state.PhaseIdle})
	require.NoError(t, err)

	locks, err := s.ListLocks(ctx)
	require.NoError(t, err)
	require.Empty(t, locks, "before the backfill the old pause is not in the index")

	n, err := s.Backfill(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the old rollout and the old lock; not the hook, not the record written with the index")
	locks, err = s.ListLocks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 1)
	require.Equal(t, "legacy", locks[0].Group)
	require.Equal(t, "incident", locks[0].Reason)
	rs, err := s.ListRollouts(ctx)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	require.Equal(t, "legacy", rs[0].Group)
	require.Equal(t, state.PhaseReplacing, rs[0].Phase)
	require.EqualValues(t, 7, rs[0].Version, "the backfill changes no version: a writer holding version 7 still wins")

	n, err = s.Backfill(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a second start finds nothing to do")
}

// TestRetentionExpiresHistoryAndCompletedLifecycleActionsOnly pins which items carry expiresAt once a
// retention is set: history entries (at + retention) and completed lifecycle actions (completedAt +
// retention); never a rollout, a lock or a lifecycle action still in progress.
func TestRetentionExpiresHistoryAndCompletedLifecycleActionsOnly(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	s := state.NewDynamoDB(client, table)
	const retention = 30 * 24 * time.Hour
	require.NoError(t, s.SetRetention(retention))
	at := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	epoch := func(t time.Time) string { return strconv.FormatInt(t.Add(retention).Unix()+1, 10) } // rounded up

	r, err := s.PutRollout(ctx, state.Rollout{Group: "g", Phase: state.PhaseIdle})
	require.NoError(t, err)
	_, err = s.PutRolloutWithHistory(ctx, r, []state.HistoryEntry{{Group: "g", At: at, Event: "detected"}})
	require.NoError(t, err)
	require.NoError(t, s.AppendHistory(ctx, state.HistoryEntry{Group: "w", At: at.Add(time.Hour), Event: "upgrade"}))
	_, err = s.PutHook(ctx, state.Hook{Token: "open", State: state.HookDraining, ReceivedAt: at})
	require.NoError(t, err)
	h, err := s.PutHook(ctx, state.Hook{Token: "done", State: state.HookDraining, ReceivedAt: at})
	require.NoError(t, err)
	h.State, h.CompletedAt = state.HookCompleted, at.Add(2*time.Hour)
	_, err = s.PutHook(ctx, h)
	require.NoError(t, err)
	require.NoError(t, s.PutLock(ctx, state.Lock{Group: "g", Reason: "r", Since: at}))

	out, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	expires := map[string]string{}
	for _, item := range out.Items {
		if e, ok := item[state.AttrExpiresAt]; ok {
			expires[item["pk"].(*types.AttributeValueMemberS).Value] = e.(*types.AttributeValueMemberN).Value
		}
	}
	require.Equal(t, map[string]string{
		"target#g":  epoch(at),                    // the history entry, not the rollout or the lock
		"target#w":  epoch(at.Add(time.Hour)),     // AppendHistory
		"hook#done": epoch(at.Add(2 * time.Hour)), // completed: completedAt + retention
	}, expires)
}

func TestSetRetentionRefusesLessThanTheLongestSQSRetention(t *testing.T) {
	s := state.NewDynamoDB(nil, "t")
	for _, tc := range []struct {
		retention time.Duration
		ok        bool
	}{{0, true}, {state.MinRetention, true}, {state.DefaultRetention, true}, {state.MinRetention - time.Second, false}, {-time.Hour, false}} {
		err := s.SetRetention(tc.retention)
		if tc.ok {
			require.NoError(t, err, tc.retention)
		} else {
			require.ErrorContains(t, err, "at least 336h0m0s", tc.retention)
		}
	}
}

func TestCreateTableRejectsATableWithoutTheIndex(t *testing.T) {
	client := dynamodb.NewFromConfig(testenv.AWSConfig(testenv.Kumo(t)))
	ctx := testenv.Context(t)
	table := testenv.UniqueName(t, "noindex")
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	require.ErrorContains(t, state.CreateTable(ctx, client, table), "has no index kind-index")
}
