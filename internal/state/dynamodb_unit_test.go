package state_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// failingPut is a DynamoDBAPI whose PutItem and DeleteItem fail with err; other calls are not expected.
type failingPut struct {
	state.DynamoDBAPI
	err error
}

func (f failingPut) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, f.err
}

func (f failingPut) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return nil, f.err
}

var _ state.DynamoDBAPI = failingPut{}

func TestPutErrorsAreClassifiedAndNameTableAndKey(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		conflict bool
	}{
		{"condition failure by error code is ErrConflict",
			&smithy.GenericAPIError{Code: "ConditionalCheckFailedException", Message: "The conditional request failed"}, true},
		{"throttling is not ErrConflict",
			&smithy.GenericAPIError{Code: "ThrottlingException"}, false},
		{"transport error is not ErrConflict", errors.New("connection refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := state.NewDynamoDB(failingPut{err: tc.err}, "patch-agent")
			_, err := s.PutRollout(context.Background(), state.Rollout{Group: "prod-nodes", Version: 3})
			require.Equal(t, tc.conflict, errors.Is(err, state.ErrConflict), "%v", err)
			require.ErrorIs(t, err, tc.err)
			require.ErrorContains(t, err, "table patch-agent (pk target#prod-nodes, sk rollout)")

			_, err = s.PutHook(context.Background(), state.Hook{Token: "tok"})
			require.Equal(t, tc.conflict, errors.Is(err, state.ErrConflict), "%v", err)
			require.ErrorContains(t, err, "table patch-agent (pk hook#tok, sk hook)")

			// A failed condition on an event marker is a duplicate, not an error.
			first, err := s.MarkEvent(context.Background(), "evt-1", time.Now())
			require.False(t, first)
			if tc.conflict {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.err)
				require.ErrorContains(t, err, "table patch-agent (pk event#evt-1, sk event)")
			}
		})
	}
}

func TestLockErrorsNameTableAndKey(t *testing.T) {
	cause := &smithy.GenericAPIError{Code: "ThrottlingException"}
	s := state.NewDynamoDB(failingPut{err: cause}, "patch-agent")
	ctx := context.Background()

	err := s.PutLock(ctx, state.Lock{Group: "prod-nodes", Reason: "incident"})
	require.ErrorIs(t, err, cause)
	require.ErrorContains(t, err, "table patch-agent (pk target#prod-nodes, sk lock)")
	err = s.PutLock(ctx, state.Lock{Group: state.GlobalScope})
	require.ErrorContains(t, err, "global lock: table patch-agent (pk lock#global, sk lock)")

	err = s.DeleteLock(ctx, "prod-nodes")
	require.ErrorIs(t, err, cause)
	require.ErrorContains(t, err, "table patch-agent (pk target#prod-nodes, sk lock)")
	err = s.DeleteLock(ctx, state.GlobalScope)
	require.ErrorContains(t, err, "table patch-agent (pk lock#global, sk lock)")
}

func TestMarkEventRejectsAnEmptyID(t *testing.T) {
	s := state.NewDynamoDB(failingPut{}, "patch-agent")
	_, err := s.MarkEvent(context.Background(), "", time.Now())
	require.ErrorContains(t, err, "id is empty")
}

func TestHistorySortKeysSortByTime(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	times := []time.Time{
		base,
		base.Add(100 * time.Millisecond), // RFC3339Nano: ...05.1Z, which sorts after ...05.12Z
		base.Add(120 * time.Millisecond),
		base.Add(time.Second).In(time.FixedZone("UTC-5", -5*3600)), // later instant, earlier wall clock
	}
	var keys []string
	for i, at := range times {
		keys = append(keys, state.HistorySortKey(at, uint64(len(times)-i)))
	}
	require.True(t, sort.StringsAreSorted(keys), "%q", keys)
	require.Equal(t, "history#2026-01-02T03:04:05.100000000Z#00000000000000000003", keys[1])
}

// scriptedTransactions is a DynamoDBAPI whose TransactWriteItems answers with errs in turn (then success) and
// records every request.
type scriptedTransactions struct {
	state.DynamoDBAPI
	errs []error
	got  []*dynamodb.TransactWriteItemsInput
}

func (s *scriptedTransactions) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	s.got = append(s.got, in)
	if n := len(s.got); n <= len(s.errs) {
		return nil, s.errs[n-1]
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// canceled is DynamoDB's TransactionCanceledException with one reason code per item ("None" for items that
// passed).
func canceled(codes ...string) error {
	reasons := make([]types.CancellationReason, len(codes))
	for i, c := range codes {
		reasons[i] = types.CancellationReason{Code: aws.String(c)}
	}
	return &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
}

func TestRolloutWithHistoryTransactionOutcomes(t *testing.T) {
	entries := []state.HistoryEntry{{Group: "prod-nodes", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Event: "detected"}}
	for _, tc := range []struct {
		name     string
		errs     []error
		calls    int
		conflict bool
		fails    bool
	}{
		{name: "written at the first attempt", calls: 1},
		{name: "rollout condition failed: ErrConflict, not retried", errs: []error{canceled("ConditionalCheckFailed", "None")}, calls: 1, conflict: true, fails: true},
		{name: "history sort key taken: retried with a new sequence number", errs: []error{canceled("None", "ConditionalCheckFailed")}, calls: 2},
		{name: "both failed: ErrConflict", errs: []error{canceled("ConditionalCheckFailed", "ConditionalCheckFailed")}, calls: 1, conflict: true, fails: true},
		{name: "transaction conflict is an error, not ErrConflict", errs: []error{canceled("None", "TransactionConflict")}, calls: 1, fails: true},
		{name: "history keys taken five times: error", errs: []error{canceled("None", "ConditionalCheckFailed"), canceled("None", "ConditionalCheckFailed"),
			canceled("None", "ConditionalCheckFailed"), canceled("None", "ConditionalCheckFailed"), canceled("None", "ConditionalCheckFailed")}, calls: 5, fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &scriptedTransactions{errs: tc.errs}
			s := state.NewDynamoDB(api, "patch-agent")
			got, err := s.PutRolloutWithHistory(context.Background(), state.Rollout{Group: "prod-nodes", Version: 3}, entries)
			require.Len(t, api.got, tc.calls)
			require.Equal(t, tc.conflict, errors.Is(err, state.ErrConflict), "%v", err)
			if tc.fails {
				require.Error(t, err)
				require.ErrorContains(t, err, "table patch-agent (pk target#prod-nodes, sk rollout)")
				return
			}
			require.NoError(t, err)
			require.Equal(t, int64(4), got.Version)
			keys := map[string]bool{}
			for _, in := range api.got {
				require.Len(t, in.TransactItems, 2)
				put := in.TransactItems[0].Put
				require.Len(t, put.ExpressionAttributeValues, 1, "the rollout is conditional on the version read")
				for _, v := range put.ExpressionAttributeValues {
					require.Equal(t, "3", v.(*types.AttributeValueMemberN).Value)
				}
				sk := in.TransactItems[1].Put.Item["sk"].(*types.AttributeValueMemberS).Value
				require.False(t, keys[sk], "a retry takes a new sort key")
				keys[sk] = true
			}
		})
	}
}

// recordingPut is a DynamoDBAPI whose PutItem records its input and fails with err; other calls are not
// expected.
type recordingPut struct {
	state.DynamoDBAPI
	in  *dynamodb.PutItemInput
	err error
}

func (r *recordingPut) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	r.in = in
	if r.err != nil {
		return nil, r.err
	}
	return &dynamodb.PutItemOutput{}, nil
}

func TestPutLockIfAbsentIsOneConditionalPutThatReturnsTheLockInPlace(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	until := now.Add(time.Hour)
	api := &recordingPut{err: &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed"),
		Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "lock#global"}, "sk": &types.AttributeValueMemberS{Value: "lock"},
			"reason": &types.AttributeValueMemberS{Value: "freeze"}, "who": &types.AttributeValueMemberS{Value: "alice"},
			"until": &types.AttributeValueMemberS{Value: until.Format(time.RFC3339Nano)},
		}}}
	s := state.NewDynamoDB(api, "patch-agent")

	held, written, err := s.PutLockIfAbsent(ctx, state.Lock{Group: state.GlobalScope, Reason: "incident", Who: "bob", Since: now}, now)
	require.NoError(t, err)
	require.False(t, written)
	require.Equal(t, "alice", held.Who)
	require.Equal(t, "freeze", held.Reason)
	require.True(t, held.Until.Equal(until), "until %s", held.Until)
	require.Contains(t, aws.ToString(api.in.ConditionExpression), "attribute_not_exists")
	require.Equal(t, types.ReturnValuesOnConditionCheckFailureAllOld, api.in.ReturnValuesOnConditionCheckFailure)

	api.err = nil
	_, written, err = s.PutLockIfAbsent(ctx, state.Lock{Group: state.GlobalScope, Reason: "incident", Who: "bob", Since: now}, now)
	require.NoError(t, err)
	require.True(t, written)
}
