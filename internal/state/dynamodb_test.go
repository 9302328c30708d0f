package state_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/state/storetest"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

// TestMain stops the kumo this package's tests started (testenv's package doc).
func TestMain(m *testing.M) { testenv.Main(m) }

// newTable creates a table with a unique name on kumo, deleted when the test ends.
func newTable(t *testing.T) (*dynamodb.Client, string) {
	t.Helper()
	client := dynamodb.NewFromConfig(testenv.AWSConfig(testenv.Kumo(t)))
	table := testenv.UniqueName(t, "state")
	require.NoError(t, state.CreateTable(testenv.Context(t), client, table))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		require.NoError(t, err)
	})
	return client, table
}

func TestDynamoDBConformance(t *testing.T) {
	testenv.Kumo(t)
	storetest.Run(t, func(t *testing.T) state.Store {
		client, table := newTable(t)
		s := state.NewDynamoDB(client, table)
		state.SetPageSize(s, 2) // every list and history read takes several pages
		return s
	})
}

func TestDynamoDBConformanceWithDefaultPages(t *testing.T) {
	testenv.Kumo(t)
	storetest.Run(t, func(t *testing.T) state.Store {
		client, table := newTable(t)
		return state.NewDynamoDB(client, table)
	})
}

func TestCreateTableAcceptsAnExistingTable(t *testing.T) {
	client, table := newTable(t)
	require.NoError(t, state.CreateTable(testenv.Context(t), client, table))
}

func TestCreateTableRejectsAnotherKeySchema(t *testing.T) {
	client := dynamodb.NewFromConfig(testenv.AWSConfig(testenv.Kumo(t)))
	ctx := testenv.Context(t)
	table := testenv.UniqueName(t, "other")
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})

	err = state.CreateTable(ctx, client, table)
	require.ErrorContains(t, err, "key schema")
}

// TestDynamoDBItemLayout pins the schema docs/state.md documents: keys, the version attribute written as
// expected+1, and expiresAt (epoch seconds, rounded up) on processed-event markers only.
func TestDynamoDBItemLayout(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	s := state.NewDynamoDB(client, table)

	r, err := s.PutRollout(ctx, state.Rollout{Group: "prod-nodes", Phase: state.PhaseDetected})
	require.NoError(t, err)
	_, err = s.PutRollout(ctx, r)
	require.NoError(t, err)
	_, err = s.PutHook(ctx, state.Hook{Token: "tok-1", Group: "prod-nodes"})
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	require.NoError(t, s.AppendHistory(ctx, state.HistoryEntry{Group: "prod-nodes", At: at, Event: "detected"}))
	require.NoError(t, s.PutLock(ctx, state.Lock{Group: state.GlobalScope, Reason: "freeze", Who: "alice", Since: at}))
	require.NoError(t, s.PutLock(ctx, state.Lock{Group: "prod-nodes", Reason: "incident", Who: "bob", Since: at}))
	first, err := s.MarkEvent(ctx, "evt-1", at) // 1767323045.6 -> 1767323046
	require.NoError(t, err)
	require.True(t, first)
	first, err = s.MarkEvent(ctx, "evt-2", time.Time{}) // no expiry: no expiresAt
	require.NoError(t, err)
	require.True(t, first)

	out, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	got := map[string]string{} // pk|sk -> version
	expires := map[string]string{}
	for _, item := range out.Items {
		pk := item["pk"].(*types.AttributeValueMemberS).Value
		sk := item["sk"].(*types.AttributeValueMemberS).Value
		version := ""
		if v, ok := item["version"].(*types.AttributeValueMemberN); ok {
			version = v.Value
		}
		if strings.HasPrefix(sk, "history#") {
			require.Regexp(t, `^history#2026-01-02T03:04:05\.600000000Z#\d{20}$`, sk)
			sk = "history#..."
		}
		if e, ok := item[state.AttrExpiresAt]; ok {
			require.Equal(t, "event", sk, "only event markers expire")
			expires[pk] = e.(*types.AttributeValueMemberN).Value
		}
		got[pk+"|"+sk] = version
	}
	require.Equal(t, map[string]string{
		"target#prod-nodes|rollout":     "2",
		"hook#tok-1|hook":               "1",
		"target#prod-nodes|history#...": "",
		"lock#global|lock":              "",
		"target#prod-nodes|lock":        "",
		"event#evt-1|event":             "",
		"event#evt-2|event":             "",
	}, got)
	require.Equal(t, map[string]string{"event#evt-1": "1767323046"}, expires)
}

// transactRecorder records the TransactWriteItems requests a store sends.
type transactRecorder struct {
	state.DynamoDBAPI
	sent []*dynamodb.TransactWriteItemsInput
}

func (r *transactRecorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	r.sent = append(r.sent, in)
	return r.DynamoDBAPI.TransactWriteItems(ctx, in, opts...)
}

// TestKumoGuardedWriteIsOneTransactionWithBothPauseLockChecks: on kumo (TransactWriteItems with
// ConditionCheck), PutRolloutUnlessPaused sends one transaction of the rollout Put and a ConditionCheck on
// each lock item (lock#global and target#<group>, sort key lock); a lock with an end stores it as the Number
// untilNanos; a group pause put just before the write cancels it on the lock's check (ErrPaused, with the
// lock's reason, read back although kumo returns no item with the cancellation), a lock whose untilNanos has
// passed does not.
func TestKumoGuardedWriteIsOneTransactionWithBothPauseLockChecks(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	rec := &transactRecorder{DynamoDBAPI: client}
	s := state.NewDynamoDB(rec, table)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	v1, err := s.PutRollout(ctx, state.Rollout{Group: "prod-nodes", Phase: state.PhaseReplacing})
	require.NoError(t, err)
	until := now.Add(-time.Nanosecond)
	require.NoError(t, s.PutLock(ctx, state.Lock{Group: "prod-nodes", Reason: "over", Who: "bob", Since: now.Add(-time.Hour), Until: until}))
	item, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "target#prod-nodes"}, "sk": &types.AttributeValueMemberS{Value: "lock"}}})
	require.NoError(t, err)
	require.Equal(t, &types.AttributeValueMemberN{Value: "1767323044999999999"}, item.Item[state.AttrUntilNanos])

	v2, err := s.PutRolloutUnlessPaused(ctx, v1, nil, now, nil)
	require.NoError(t, err, "a lock ended a nanosecond ago does not hold")
	require.Len(t, rec.sent, 1)
	items := rec.sent[0].TransactItems
	require.Len(t, items, 3)
	require.NotNil(t, items[0].Put)
	var checked []string
	for _, it := range items[1:] {
		require.NotNil(t, it.ConditionCheck)
		checked = append(checked, it.ConditionCheck.Key["pk"].(*types.AttributeValueMemberS).Value+"|"+it.ConditionCheck.Key["sk"].(*types.AttributeValueMemberS).Value)
	}
	require.Equal(t, []string{"lock#global|lock", "target#prod-nodes|lock"}, checked)

	require.NoError(t, s.PutLock(ctx, state.Lock{Group: "prod-nodes", Reason: "incident", Who: "alice", Since: now}))
	_, err = s.PutRolloutUnlessPaused(ctx, v2, nil, now, nil)
	require.ErrorIs(t, err, state.ErrPaused)
	l, ok := state.PausedBy(err)
	require.True(t, ok)
	require.Equal(t, "incident", l.Reason)
	got, err := s.GetRollout(ctx, "prod-nodes")
	require.NoError(t, err)
	require.Equal(t, v2.Version, got.Version, "nothing written while paused")
}

// A pause lock written by an earlier version has no untilNanos, so the guard's condition holds it whatever its
// until. Once its until has passed, the guarded write it stopped adds untilNanos (conditionally on the lock being
// unchanged) and goes through: an earlier version's `pause --until` still ends. One that has not ended yet
// keeps holding and is not touched.
func TestKumoPauseLockOfAnEarlierVersionWithoutUntilNanosEndsAtItsUntil(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	s := state.NewDynamoDB(client, table)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lockKey := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "target#prod-nodes"}, "sk": &types.AttributeValueMemberS{Value: "lock"}}
	putLegacy := func(until time.Time) {
		item := map[string]types.AttributeValue{"pk": lockKey["pk"], "sk": lockKey["sk"], "kind": &types.AttributeValueMemberS{Value: "lock"},
			"group": &types.AttributeValueMemberS{Value: "prod-nodes"}, "reason": &types.AttributeValueMemberS{Value: "old"},
			"who": &types.AttributeValueMemberS{Value: "bob"}, "since": &types.AttributeValueMemberS{Value: now.Add(-time.Hour).Format(time.RFC3339Nano)},
			"until": &types.AttributeValueMemberS{Value: until.Format(time.RFC3339Nano)}}
		_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
		require.NoError(t, err)
	}
	untilNanos := func() types.AttributeValue {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true), Key: lockKey})
		require.NoError(t, err)
		return out.Item[state.AttrUntilNanos]
	}
	v1, err := s.PutRollout(ctx, state.Rollout{Group: "prod-nodes", Phase: state.PhaseReplacing})
	require.NoError(t, err)

	putLegacy(now.Add(time.Minute))
	_, err = s.PutRolloutUnlessPaused(ctx, v1, nil, now, nil)
	require.ErrorIs(t, err, state.ErrPaused, "not ended yet: it holds")
	require.Nil(t, untilNanos(), "a lock that holds is not touched")

	putLegacy(now.Add(-time.Second))
	v2, err := s.PutRolloutUnlessPaused(ctx, v1, nil, now, nil)
	require.NoError(t, err, "ended a second ago: the write goes through")
	require.Equal(t, v1.Version+1, v2.Version)
	require.Equal(t, &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(-time.Second).UnixNano(), 10)}, untilNanos())
}

// A pause until a time past 2262-04-11 (the end of int64 nanoseconds) holds: its untilNanos is clamped to the
// largest int64, not wrapped round to a negative number that every guarded write would pass.
func TestKumoPauseUntilFarInTheFutureHoldsTheGuardedWrite(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	s := state.NewDynamoDB(client, table)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v1, err := s.PutRollout(ctx, state.Rollout{Group: "prod-nodes", Phase: state.PhaseReplacing})
	require.NoError(t, err)
	for _, until := range []time.Time{time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)} {
		require.NoError(t, s.PutLock(ctx, state.Lock{Group: "prod-nodes", Reason: "freeze", Who: "bob", Since: now, Until: until}))
		_, err = s.PutRolloutUnlessPaused(ctx, v1, nil, now, nil)
		require.ErrorIs(t, err, state.ErrPaused, "paused until %s", until)
	}
}

// retriedDelete answers a DeleteItem as the SDK does when the first answer was lost (a timeout or a 5xx
// after DynamoDB applied it): the request is sent again, and the caller sees the second answer only.
type retriedDelete struct {
	state.DynamoDBAPI
}

func (r retriedDelete) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if _, err := r.DynamoDBAPI.DeleteItem(ctx, in, opts...); err != nil {
		return nil, err
	}
	return r.DynamoDBAPI.DeleteItem(ctx, in, opts...)
}

// TestKumoLiftLockWhoseFirstAnswerWasLostStillReportsThePauseItLifted: the DeleteItem of a resume was applied,
// its answer lost and the request sent again, which finds nothing to delete: the resume still reports the
// pause it lifted (the consistent read before the delete), not "nothing to resume"; the lock is gone.
func TestKumoLiftLockWhoseFirstAnswerWasLostStillReportsThePauseItLifted(t *testing.T) {
	client, table := newTable(t)
	ctx := testenv.Context(t)
	s := state.NewDynamoDB(retriedDelete{client}, table)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, s.PutLock(ctx, state.Lock{Group: "prod-nodes", Reason: "incident 42", Who: "alice", Since: now}))

	lifted, ok, err := s.LiftLock(ctx, "prod-nodes")
	require.NoError(t, err)
	require.True(t, ok, "the pause was lifted by the first request")
	require.Equal(t, "incident 42", lifted.Reason)
	require.Equal(t, "alice", lifted.Who)
	held, err := s.PauseHolding(ctx, "prod-nodes", now)
	require.NoError(t, err)
	require.Nil(t, held)

	_, ok, err = s.LiftLock(ctx, "prod-nodes")
	require.NoError(t, err)
	require.False(t, ok, "nothing to lift the second time")
}
