package state

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// MinRetention is the shortest retention SetRetention accepts: 14 days, the longest an SQS queue keeps a
// message (Amazon SQS Developer Guide, "Amazon SQS message quotas": message retention up to 1,209,600
// seconds). A lifecycle message redelivered late must still find its Completed record, or its action would be
// looked at again as new.
const MinRetention = 14 * 24 * time.Hour

// DefaultRetention is the retention of `patch-agent run --history-retention` when the flag is not given.
const DefaultRetention = 90 * 24 * time.Hour

// SetRetention makes history entries and completed lifecycle-action records expire: each carries the TTL
// attribute expiresAt = its time (HistoryEntry.At; Hook.CompletedAt, or ReceivedAt when that is zero) +
// retention, in epoch seconds rounded up, and DynamoDB's time to live deletes it some time after (Amazon
// DynamoDB Developer Guide, "Using time to live (TTL) in DynamoDB": deletion typically within a few days of
// expiry). Zero keeps them forever (the default of NewDynamoDB). Only writes made after the call carry it.
// A retention below MinRetention is an error and changes nothing.
func (d *DynamoDB) SetRetention(retention time.Duration) error {
	if retention < 0 || (retention > 0 && retention < MinRetention) {
		return fmt.Errorf("retention %s: want 0 (keep forever) or at least %s, the longest an SQS queue keeps a lifecycle message", retention, MinRetention)
	}
	d.retention = retention
	return nil
}

// expire sets the TTL attribute of item to at + the retention, when a retention is set and at is known.
func (d *DynamoDB) expire(item map[string]types.AttributeValue, at time.Time) {
	if d.retention <= 0 || at.IsZero() {
		return
	}
	item[AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(epochSecondsCeil(at.Add(d.retention)), 10)}
}

// stamp adds what a versioned record's item carries besides its fields: the index attribute of a rollout
// record, the TTL of a completed lifecycle action.
func (d *DynamoDB) stamp(item map[string]types.AttributeValue, sk string, record any) {
	switch r := record.(type) {
	case Rollout:
		if sk == skRollout {
			item[AttrKind] = &types.AttributeValueMemberS{Value: skRollout}
		}
	case Hook:
		if r.State == HookCompleted {
			at := r.CompletedAt
			if at.IsZero() {
				at = r.ReceivedAt
			}
			d.expire(item, at)
		}
	}
}

// kindIndex is the definition of IndexKind: hash AttrKind, range AttrPK, every attribute projected, so a
// listing needs no read of the table itself. On-demand tables need no throughput for it.
func kindIndex() types.GlobalSecondaryIndex {
	return types.GlobalSecondaryIndex{
		IndexName: aws.String(IndexKind),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrKind), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeRange},
		},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
	}
}

// hasKindIndex reports whether a described table has IndexKind with the key schema kindIndex gives.
func hasKindIndex(t *types.TableDescription) bool {
	if t == nil {
		return false
	}
	for _, ix := range t.GlobalSecondaryIndexes {
		if aws.ToString(ix.IndexName) != IndexKind || len(ix.KeySchema) != 2 {
			continue
		}
		return aws.ToString(ix.KeySchema[0].AttributeName) == AttrKind && ix.KeySchema[0].KeyType == types.KeyTypeHash &&
			aws.ToString(ix.KeySchema[1].AttributeName) == AttrPK && ix.KeySchema[1].KeyType == types.KeyTypeRange
	}
	return false
}

// queryKind returns every item of the index IndexKind whose kind is kind, decoded as T, with a paginated
// Query (Limit d.pageSize per page when set), in pk order.
func queryKind[T any](ctx context.Context, d *DynamoDB, kind string) ([]T, error) {
	expr, err := expression.NewBuilder().WithKeyCondition(expression.Key(AttrKind).Equal(expression.Value(kind))).Build()
	if err != nil {
		return nil, fmt.Errorf("building key condition: %w", err)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		IndexName:                 aws.String(IndexKind),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}
	if d.pageSize > 0 {
		in.Limit = aws.Int32(d.pageSize)
	}
	out := []T{}
	pages := dynamodb.NewQueryPaginator(d.api, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", IndexKind, err)
		}
		var items []T
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &items); err != nil {
			return nil, fmt.Errorf("index %s: decoding: %w", IndexKind, err)
		}
		out = append(out, items...)
	}
	return out, nil
}

// Backfill adds the index attribute to rollout records and pause locks written before the index existed (by
// an agent or operator CLI of an earlier version), so that ListRollouts and ListLocks see them: without it,
// a group paused before the upgrade would look unpaused. It runs once at start-up — one paginated Scan
// (attribute_not_exists(kind) and sk is "rollout" or "lock"), off the reconcile loop — and one UpdateItem per
// item found, SET kind conditional on the item still existing without it, so a record rewritten or deleted
// meanwhile is left as it is. It returns how many items it updated; the task role needs dynamodb:Scan and
// dynamodb:UpdateItem on the table.
func (d *DynamoDB) Backfill(ctx context.Context) (int, error) {
	filter := expression.AttributeNotExists(expression.Name(AttrKind)).And(
		expression.Name(AttrSK).Equal(expression.Value(skRollout)).Or(expression.Name(AttrSK).Equal(expression.Value(skLock))))
	expr, err := expression.NewBuilder().WithFilter(filter).WithProjection(expression.NamesList(expression.Name(AttrPK), expression.Name(AttrSK))).Build()
	if err != nil {
		return 0, fmt.Errorf("backfilling index %s of table %s: building filter: %w", IndexKind, d.table, err)
	}
	in := &dynamodb.ScanInput{TableName: aws.String(d.table), FilterExpression: expr.Filter(), ProjectionExpression: expr.Projection(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true)}
	if d.pageSize > 0 {
		in.Limit = aws.Int32(d.pageSize)
	}
	cond := expression.AttributeExists(expression.Name(AttrPK)).And(expression.AttributeNotExists(expression.Name(AttrKind)))
	n := 0
	pages := dynamodb.NewScanPaginator(d.api, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return n, fmt.Errorf("backfilling index %s of table %s: %w", IndexKind, d.table, err)
		}
		for _, item := range page.Items {
			var k struct {
				PK string `dynamodbav:"pk"`
				SK string `dynamodbav:"sk"`
			}
			if err := attributevalue.UnmarshalMap(item, &k); err != nil {
				return n, fmt.Errorf("backfilling index %s of table %s: decoding: %w", IndexKind, d.table, err)
			}
			upd, err := expression.NewBuilder().WithCondition(cond).
				WithUpdate(expression.Set(expression.Name(AttrKind), expression.Value(k.SK))).Build()
			if err != nil {
				return n, fmt.Errorf("backfilling index %s of table %s: building update: %w", IndexKind, d.table, err)
			}
			_, err = d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(d.table), Key: key(k.PK, k.SK),
				UpdateExpression: upd.Update(), ConditionExpression: upd.Condition(),
				ExpressionAttributeNames: upd.Names(), ExpressionAttributeValues: upd.Values()})
			switch {
			case err == nil:
				n++
			case isConditionalCheckFailed(err): // rewritten with the attribute, or deleted, meanwhile
			default:
				return n, fmt.Errorf("backfilling index %s of table %s (pk %s, sk %s): %w", IndexKind, d.table, k.PK, k.SK, err)
			}
		}
	}
	return n, nil
}
