package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// DynamoDBAPI is the part of the DynamoDB API the store uses; *dynamodb.Client satisfies it.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, params *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, params *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	// Scan serves Backfill, once at start-up (the table), and ListRolloutsAndLocks (the sparse index IndexKind,
	// never the table).
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	// UpdateItem serves only Backfill: it adds the index attribute to an item written before the index.
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	// TransactWriteItems writes a rollout record and its history entries atomically (PutRolloutWithHistory).
	TransactWriteItems(ctx context.Context, params *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// TableAPI is the part of the DynamoDB API that CreateTable uses; *dynamodb.Client satisfies it.
type TableAPI interface {
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var (
	_ DynamoDBAPI            = (*dynamodb.Client)(nil)
	_ TableAPI               = (*dynamodb.Client)(nil)
	_ Store                  = (*DynamoDB)(nil)
	_ RolloutsAndLocksLister = (*DynamoDB)(nil)
	_ RolloutsAndLocksLister = (*Memory)(nil)
)

// Attribute names and key shapes of the table (docs/state.md describes the schema).
const (
	// AttrPK and AttrSK are the table's partition and sort keys (both strings).
	AttrPK = "pk"
	AttrSK = "sk"
	// AttrVersion is the optimistic-concurrency counter every conditional write compares.
	AttrVersion = "version"
	// AttrExpiresAt is the table's TTL attribute (epoch seconds, a Number). Processed-event (dedupe) records
	// carry it, and, with a retention set (SetRetention), history entries and completed lifecycle-action
	// records; rollout, lock, drain-mark and open lifecycle-action items never do, so they are never expired.
	AttrExpiresAt = "expiresAt"
	// AttrKind is the partition key of the sparse index IndexKind: "rollout" on rollout records, "lock" on
	// pause locks, absent on every other item (so the index holds only those two kinds).
	AttrKind = "kind"
	// IndexKind is the global secondary index (hash AttrKind, range AttrPK, every attribute projected) that
	// ListRollouts and ListLocks Query instead of scanning the table.
	IndexKind = "kind-index"

	pkTargetPrefix   = "target#"
	pkHookPrefix     = "hook#"
	pkEventPrefix    = "event#"
	pkGlobalLock     = "lock#global"
	pkDrainMarks     = "drain#marks" // every drain mark in one partition: listed with one Query
	skDrainPrefix    = "instance#"
	skRollout        = "rollout"
	skHook           = "hook"
	skLock           = "lock"
	skEvent          = "event"
	skHistoryPrefix  = "history#"
	historyTimeField = "2006-01-02T15:04:05.000000000Z" // fixed width, so the sort key sorts by time
	// historyPutAttempts bounds the retries of a history write whose sort key is already taken.
	historyPutAttempts = 5
)

// tableWait bounds how long CreateTable waits for a new table to become ACTIVE.
const tableWait = 5 * time.Minute

// DynamoDB is the Store backed by one DynamoDB table. It is safe for concurrent use, also by several agents
// on one table: every rollout and hook write is conditional on the version read (docs/state.md).
type DynamoDB struct {
	api   DynamoDBAPI
	table string
	// pageSize is the Limit of each Scan/Query page; 0 lets DynamoDB page at 1 MB. Tests lower it to
	// exercise pagination.
	pageSize int32
	// retention, when above zero, is how long history entries and completed lifecycle-action records are
	// kept: they carry expiresAt = their time + retention (SetRetention).
	retention time.Duration
	// seq makes the sort keys of history entries written by this store at the same nanosecond unique and
	// keeps them in write order.
	seq atomic.Uint64
}

// NewDynamoDB returns a Store that keeps its records in table (which must exist with string keys pk and sk;
// see CreateTable).
func NewDynamoDB(api DynamoDBAPI, table string) *DynamoDB {
	return &DynamoDB{api: api, table: table}
}

// Table returns the name of the table the store writes to.
func (d *DynamoDB) Table() string { return d.table }

// RolloutKey returns the primary key (pk, sk) of a target's rollout record.
func RolloutKey(group string) (pk, sk string) { return pkTargetPrefix + group, skRollout }

// HookKey returns the primary key (pk, sk) of a lifecycle action's progress record.
func HookKey(token string) (pk, sk string) { return pkHookPrefix + token, skHook }

// LockKey returns the primary key (pk, sk) of a pause lock: ("lock#global", "lock") for GlobalScope,
// ("target#<group>", "lock") for a group.
func LockKey(group string) (pk, sk string) {
	if group == GlobalScope {
		return pkGlobalLock, skLock
	}
	return pkTargetPrefix + group, skLock
}

// DrainMarkKey returns the primary key (pk, sk) of an instance's drain mark: ("drain#marks",
// "instance#<id>"), every mark in one partition.
func DrainMarkKey(instanceID string) (pk, sk string) { return pkDrainMarks, skDrainPrefix + instanceID }

// EventKey returns the primary key (pk, sk) of a processed-event marker.
func EventKey(id string) (pk, sk string) { return pkEventPrefix + id, skEvent }

// HistorySortKey returns the sort key of a history entry written at `at` with sequence number seq:
// "history#<UTC time, RFC 3339 with exactly nine fractional digits>#<seq, 20 digits>". The fixed width makes
// the lexical order of sort keys the order of time (time.RFC3339Nano trims trailing zeros and would not).
func HistorySortKey(at time.Time, seq uint64) string {
	return fmt.Sprintf("%s%s#%020d", skHistoryPrefix, at.UTC().Format(historyTimeField), seq)
}

// GetRollout implements Store with a strongly consistent read.
func (d *DynamoDB) GetRollout(ctx context.Context, group string) (Rollout, error) {
	pk, sk := RolloutKey(group)
	var r Rollout
	if err := d.get(ctx, pk, sk, &r); err != nil {
		return Rollout{}, fmt.Errorf("reading rollout of %s: %w", group, err)
	}
	return r, nil
}

// PutRollout implements Store: one conditional PutItem on the version attribute.
func (d *DynamoDB) PutRollout(ctx context.Context, r Rollout) (Rollout, error) {
	if r.Group == "" {
		return Rollout{}, errors.New("writing rollout: group is empty")
	}
	stored := clone(r)
	stored.Version = r.Version + 1
	pk, sk := RolloutKey(r.Group)
	if err := d.putVersioned(ctx, pk, sk, r.Version, stored); err != nil {
		return Rollout{}, fmt.Errorf("writing rollout of %s at version %d: %w", r.Group, r.Version, err)
	}
	return clone(stored), nil
}

// PutRolloutWithHistory implements Store with one TransactWriteItems: a Put of the rollout record with the
// same condition as PutRollout (attribute_not_exists(pk) for version 0, version = :n otherwise) and one Put
// per history entry conditional on its sort key being free (Amazon DynamoDB Developer Guide, "Amazon DynamoDB
// Transactions": all the writes succeed or none does). A TransactionCanceledException whose reason for the
// rollout item is ConditionalCheckFailed is ErrConflict; one whose only failed condition is a history sort
// key another writer took is retried with new sequence numbers (at most 5 attempts). The SDK fills in the
// ClientRequestToken, so its own retries of one attempt are idempotent. The task role needs dynamodb:PutItem
// on the table, which governs the Puts of a transaction. No entries is PutRollout (one PutItem).
func (d *DynamoDB) PutRolloutWithHistory(ctx context.Context, r Rollout, history []HistoryEntry) (Rollout, error) {
	if len(history) == 0 {
		return d.PutRollout(ctx, r)
	}
	if r.Group == "" {
		return Rollout{}, errors.New("writing rollout: group is empty")
	}
	if err := checkHistoryOf(r, history); err != nil {
		return Rollout{}, err
	}
	stored := clone(r)
	stored.Version = r.Version + 1
	pk, sk := RolloutKey(r.Group)
	where := fmt.Sprintf("writing rollout of %s at version %d with %d history entries: table %s (pk %s, sk %s)",
		r.Group, r.Version, len(history), d.table, pk, sk)
	rollout, err := d.versionedPut(pk, sk, r.Version, stored)
	if err != nil {
		return Rollout{}, fmt.Errorf("%s: %w", where, err)
	}
	free, entries, err := d.historyItems(history)
	if err != nil {
		return Rollout{}, fmt.Errorf("%s: %w", where, err)
	}
	for attempt := 1; ; attempt++ {
		items := []types.TransactWriteItem{{Put: rollout}}
		for i, e := range history {
			item := maps.Clone(entries[i]) // a new map per attempt: the last request is left as it was sent
			item[AttrPK] = &types.AttributeValueMemberS{Value: pk}
			item[AttrSK] = &types.AttributeValueMemberS{Value: HistorySortKey(e.At, d.seq.Add(1))}
			items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(d.table), Item: item,
				ConditionExpression: free.Condition(), ExpressionAttributeNames: free.Names(), ExpressionAttributeValues: free.Values()}})
		}
		_, err := d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return clone(stored), nil
		}
		switch failed := canceledOnCondition(err); {
		case len(failed) > 0 && failed[0]:
			return Rollout{}, fmt.Errorf("%s: %w: %w", where, ErrConflict, err)
		case len(failed) > 0 && attempt < historyPutAttempts:
			continue // only history sort keys were taken: new sequence numbers
		default:
			return Rollout{}, fmt.Errorf("%s: %w", where, err)
		}
	}
}

// historyItems marshals history for one transaction (with its expiresAt) and builds the condition each entry's Put
// carries (attribute_not_exists(pk): a history sort key is never overwritten).
func (d *DynamoDB) historyItems(history []HistoryEntry) (expression.Expression, []map[string]types.AttributeValue, error) {
	free, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return free, nil, fmt.Errorf("building condition: %w", err)
	}
	entries := make([]map[string]types.AttributeValue, len(history))
	for i, e := range history {
		if entries[i], err = marshal(e); err != nil {
			return free, nil, err
		}
		d.expire(entries[i], e.At)
	}
	return free, entries, nil
}

// PutRolloutUnlessPaused implements Store with one TransactWriteItems: the Put of the rollout record (the
// version condition of PutRollout), one ConditionCheck per pause lock item (LockKey(GlobalScope) and
// LockKey(r.Group)) with the condition attribute_not_exists(pk) OR untilNanos <= :now (now in nanoseconds
// since the Unix epoch; AttrUntilNanos), and one Put per history entry as in PutRolloutWithHistory.
// Transactions read the items they check strongly consistently and apply all-or-nothing (Amazon DynamoDB
// Developer Guide, "Amazon DynamoDB Transactions"; API Reference, TransactWriteItems, ConditionCheck), so a
// pause put before the call always stops the write, unlike the eventually consistent ListLocks. A
// TransactionCanceledException whose reason for a lock item is ConditionalCheckFailed is a *PausedError
// (the lock from the reason's Item, ReturnValuesOnConditionCheckFailure ALL_OLD, or, when the answer has
// none, from one consistent GetItem); one failed on the rollout item is ErrConflict; a claim (the cluster
// budget, ClusterBudgetKey) is one more Put conditional on its version, after the two ConditionChecks, and
// failed on it alone is ErrBudgetChanged; history sort keys taken are retried as in PutRolloutWithHistory.
// The task role needs dynamodb:ConditionCheckItem beside dynamodb:PutItem.
func (d *DynamoDB) PutRolloutUnlessPaused(ctx context.Context, r Rollout, history []HistoryEntry, now time.Time, claim *ClusterBudget) (Rollout, error) {
	if r.Group == "" {
		return Rollout{}, errors.New("writing rollout: group is empty")
	}
	if len(history) > MaxHistoryPerGuardedWrite {
		return Rollout{}, fmt.Errorf("writing rollout of %s with %d history entries: at most %d in one guarded write", r.Group, len(history), MaxHistoryPerGuardedWrite)
	}
	if err := checkHistoryOf(r, history); err != nil {
		return Rollout{}, err
	}
	stored := clone(r)
	stored.Version = r.Version + 1
	pk, sk := RolloutKey(r.Group)
	where := fmt.Sprintf("writing rollout of %s at version %d unless paused: table %s (pk %s, sk %s)", r.Group, r.Version, d.table, pk, sk)
	rollout, err := d.versionedPut(pk, sk, r.Version, stored)
	if err != nil {
		return Rollout{}, fmt.Errorf("%s: %w", where, err)
	}
	unlocked, err := expression.NewBuilder().WithCondition(expression.Or(
		expression.AttributeNotExists(expression.Name(AttrPK)),
		expression.Name(AttrUntilNanos).LessThanEqual(expression.Value(untilNanos(now))))).Build()
	if err != nil {
		return Rollout{}, fmt.Errorf("%s: building lock condition: %w", where, err)
	}
	free, entries, err := d.historyItems(history)
	if err != nil {
		return Rollout{}, fmt.Errorf("%s: %w", where, err)
	}
	var budget *types.Put
	if claim != nil {
		if claim.Cluster == "" {
			return Rollout{}, fmt.Errorf("%s with a drain slot claim: cluster is empty", where)
		}
		next := *claim
		next.Version = claim.Version + 1
		bpk, bsk := ClusterBudgetKey(claim.Cluster)
		if budget, err = d.versionedPut(bpk, bsk, claim.Version, next); err != nil {
			return Rollout{}, fmt.Errorf("%s: the budget of cluster %s: %w", where, claim.Cluster, err)
		}
	}
	scopes := []string{GlobalScope, r.Group}
	budgetAt := 1 + len(scopes) // the claim's index in the transaction, when there is one
	repaired := map[string]bool{}
	for attempt := 1; ; attempt++ {
		again := false
		items := []types.TransactWriteItem{{Put: rollout}}
		for _, scope := range scopes {
			lpk, lsk := LockKey(scope)
			items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(d.table),
				Key: key(lpk, lsk), ConditionExpression: unlocked.Condition(), ExpressionAttributeNames: unlocked.Names(),
				ExpressionAttributeValues: unlocked.Values(), ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
		}
		if budget != nil {
			items = append(items, types.TransactWriteItem{Put: budget})
		}
		for i, e := range history {
			item := maps.Clone(entries[i])
			item[AttrPK] = &types.AttributeValueMemberS{Value: pk}
			item[AttrSK] = &types.AttributeValueMemberS{Value: HistorySortKey(e.At, d.seq.Add(1))}
			items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(d.table), Item: item,
				ConditionExpression: free.Condition(), ExpressionAttributeNames: free.Names(), ExpressionAttributeValues: free.Values()}})
		}
		_, err := d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return clone(stored), nil
		}
		failed := canceledOnCondition(err)
		for i, scope := range scopes {
			if len(failed) > 1+i && failed[1+i] {
				l, lerr := d.pausedBy(ctx, scope, err)
				if lerr != nil {
					return Rollout{}, fmt.Errorf("%s: %w (reading the lock: %w)", where, ErrPaused, lerr)
				}
				if !l.Active(now) && !repaired[scope] {
					// A lock whose Until has passed held: written without AttrUntilNanos (an earlier version of the
					// agent or CLI). Its end is added in the numeric form the guard compares, and the write tried
					// again; a lock that another writer replaced meanwhile is left alone and keeps holding.
					repaired[scope] = true
					if ok, rerr := d.addUntilNanos(ctx, scope, l); rerr != nil {
						return Rollout{}, fmt.Errorf("%s: %w (adding %s to an ended lock: %w)", where, &PausedError{Lock: l}, AttrUntilNanos, rerr)
					} else if ok {
						again = true
						break
					}
				}
				return Rollout{}, fmt.Errorf("%s: %w", where, &PausedError{Lock: l})
			}
		}
		if again {
			continue // an ended lock of an earlier version got its AttrUntilNanos: the same write again
		}
		switch {
		case len(failed) > 0 && failed[0]:
			return Rollout{}, fmt.Errorf("%s: %w: %w", where, ErrConflict, err)
		case budget != nil && len(failed) > budgetAt && failed[budgetAt]:
			return Rollout{}, fmt.Errorf("%s: the budget of cluster %s at version %d: %w: %w", where, claim.Cluster, claim.Version, ErrBudgetChanged, err)
		case len(failed) > 0 && attempt < historyPutAttempts:
			continue // only history sort keys were taken: new sequence numbers
		default:
			return Rollout{}, fmt.Errorf("%s: %w", where, err)
		}
	}
}

// PauseHolding implements Store with one strongly consistent GetItem per lock item (the global one, then
// group's; the second is not read when the first holds).
func (d *DynamoDB) PauseHolding(ctx context.Context, group string, now time.Time) (*Lock, error) {
	for _, scope := range []string{GlobalScope, group} {
		pk, sk := LockKey(scope)
		var l Lock
		switch err := d.get(ctx, pk, sk, &l); {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading the %s lock: %w", Lock{Group: scope}.Scope(), err)
		}
		if lockHolds(l, now) {
			return &l, nil
		}
	}
	return nil, nil
}

// pausedBy returns the lock of scope whose ConditionCheck cancelled err's transaction: the item of its
// cancellation reason when DynamoDB returned one, else one consistent GetItem (a lock deleted since is
// returned as a lock of the scope with no details: the step still waits for the next look).
func (d *DynamoDB) pausedBy(ctx context.Context, scope string, err error) (Lock, error) {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, reason := range tce.CancellationReasons {
			if len(reason.Item) == 0 {
				continue
			}
			var l Lock
			pk, _ := LockKey(scope)
			if v, ok := reason.Item[AttrPK].(*types.AttributeValueMemberS); ok && v.Value == pk && attributevalue.UnmarshalMap(reason.Item, &l) == nil {
				return l, nil
			}
		}
	}
	pk, sk := LockKey(scope)
	var l Lock
	switch gerr := d.get(ctx, pk, sk, &l); {
	case errors.Is(gerr, ErrNotFound):
		return Lock{Group: scope, Reason: "lock removed since the write"}, nil
	case gerr != nil:
		return Lock{}, gerr
	}
	return l, nil
}

// addUntilNanos gives a pause lock written without AttrUntilNanos (by an earlier version) the numeric form of
// its Until, with one UpdateItem conditional on the item still being that lock (the same since and until, no
// AttrUntilNanos yet): false, with no error, when it is not (deleted, or written again meanwhile).
func (d *DynamoDB) addUntilNanos(ctx context.Context, scope string, l Lock) (bool, error) {
	if l.Until.IsZero() {
		return false, nil
	}
	since, err := attributevalue.Marshal(l.Since)
	if err != nil {
		return false, err
	}
	until, err := attributevalue.Marshal(l.Until)
	if err != nil {
		return false, err
	}
	cond := expression.AttributeNotExists(expression.Name(AttrUntilNanos)).
		And(expression.Name("since").Equal(expression.Value(since))).
		And(expression.Name("until").Equal(expression.Value(until)))
	expr, err := expression.NewBuilder().WithCondition(cond).
		WithUpdate(expression.Set(expression.Name(AttrUntilNanos), expression.Value(untilNanos(l.Until)))).Build()
	if err != nil {
		return false, err
	}
	pk, sk := LockKey(scope)
	_, err = d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(d.table), Key: key(pk, sk),
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	return err == nil, err
}

// canceledOnCondition returns, for a TransactionCanceledException, which items of the transaction (in
// request order) failed their condition (reason code ConditionalCheckFailed); nil for any other error or
// when no condition failed (a TransactionConflict, a throttled item).
func canceledOnCondition(err error) []bool {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil
	}
	out := make([]bool, len(tce.CancellationReasons))
	condFailed := false
	for i, r := range tce.CancellationReasons {
		out[i] = aws.ToString(r.Code) == "ConditionalCheckFailed"
		condFailed = condFailed || out[i]
	}
	if !condFailed {
		return nil
	}
	return out
}

// ListRollouts implements Store with a paginated Query of the index IndexKind on kind = "rollout": its cost
// grows with the rollout records, not with the history and lifecycle actions of the table. Index reads are
// eventually consistent (Amazon DynamoDB Developer Guide, "Using Global Secondary Indexes in DynamoDB":
// strongly consistent reads are not supported on a global secondary index); a record listed one write behind
// costs its writer an ErrConflict, never an effect, because every rollout write is conditional on the
// version.
func (d *DynamoDB) ListRollouts(ctx context.Context) ([]Rollout, error) {
	out, err := queryKind[Rollout](ctx, d, skRollout)
	if err != nil {
		return nil, fmt.Errorf("listing rollouts in table %s: %w", d.table, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

// ListRolloutsAndLocks implements RolloutsAndLocksLister with a paginated Scan of the index IndexKind, which
// holds only rollout records and pause locks (AttrKind is absent on every other item): one request where
// ListRollouts and ListLocks make one Query each, and as many pages as the two together. Like them it is
// eventually consistent. Items are told apart by AttrKind and sorted as ListRollouts and ListLocks sort them.
func (d *DynamoDB) ListRolloutsAndLocks(ctx context.Context) ([]Rollout, []Lock, error) {
	in := &dynamodb.ScanInput{TableName: aws.String(d.table), IndexName: aws.String(IndexKind)}
	if d.pageSize > 0 {
		in.Limit = aws.Int32(d.pageSize)
	}
	rollouts, locks := []Rollout{}, []Lock{}
	pages := dynamodb.NewScanPaginator(d.api, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("listing rollouts and locks in table %s: index %s: %w", d.table, IndexKind, err)
		}
		for _, item := range page.Items {
			kind, _ := item[AttrKind].(*types.AttributeValueMemberS)
			if kind == nil {
				continue
			}
			var err error
			switch kind.Value {
			case skRollout:
				var r Rollout
				if err = attributevalue.UnmarshalMap(item, &r); err == nil {
					rollouts = append(rollouts, r)
				}
			case skLock:
				var l Lock
				if err = attributevalue.UnmarshalMap(item, &l); err == nil {
					locks = append(locks, l)
				}
			}
			if err != nil {
				return nil, nil, fmt.Errorf("listing rollouts and locks in table %s: index %s: decoding: %w", d.table, IndexKind, err)
			}
		}
	}
	sort.Slice(rollouts, func(i, j int) bool { return rollouts[i].Group < rollouts[j].Group })
	sort.Slice(locks, func(i, j int) bool { return locks[i].Group < locks[j].Group })
	return rollouts, locks, nil
}

// GetHook implements Store with a strongly consistent read.
func (d *DynamoDB) GetHook(ctx context.Context, token string) (Hook, error) {
	pk, sk := HookKey(token)
	var h Hook
	if err := d.get(ctx, pk, sk, &h); err != nil {
		return Hook{}, fmt.Errorf("reading lifecycle action %s: %w", token, err)
	}
	return h, nil
}

// PutHook implements Store: one conditional PutItem on the version attribute.
func (d *DynamoDB) PutHook(ctx context.Context, h Hook) (Hook, error) {
	if h.Token == "" {
		return Hook{}, errors.New("writing lifecycle action: token is empty")
	}
	stored := h
	stored.Version = h.Version + 1
	pk, sk := HookKey(h.Token)
	if err := d.putVersioned(ctx, pk, sk, h.Version, stored); err != nil {
		return Hook{}, fmt.Errorf("writing lifecycle action %s at version %d: %w", h.Token, h.Version, err)
	}
	return stored, nil
}

// AppendHistory implements Store. The entry's sort key is HistorySortKey(e.At, n) with n from a per-store
// counter; the write is conditional on the key being free and retried with the next n if another writer
// took it, so an entry never overwrites another.
func (d *DynamoDB) AppendHistory(ctx context.Context, e HistoryEntry) error {
	if e.Group == "" {
		return errors.New("appending history: group is empty")
	}
	item, err := marshal(e)
	if err != nil {
		return fmt.Errorf("appending history of %s to table %s: %w", e.Group, d.table, err)
	}
	d.expire(item, e.At)
	pk, _ := RolloutKey(e.Group)
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return fmt.Errorf("appending history of %s to table %s: building condition: %w", e.Group, d.table, err)
	}
	for attempt := 1; ; attempt++ {
		sk := HistorySortKey(e.At, d.seq.Add(1))
		item[AttrPK] = &types.AttributeValueMemberS{Value: pk}
		item[AttrSK] = &types.AttributeValueMemberS{Value: sk}
		_, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                 aws.String(d.table),
			Item:                      item,
			ConditionExpression:       cond.Condition(),
			ExpressionAttributeNames:  cond.Names(),
			ExpressionAttributeValues: cond.Values(),
		})
		if err == nil {
			return nil
		}
		if !isConditionalCheckFailed(err) || attempt == historyPutAttempts {
			return fmt.Errorf("appending history of %s to table %s (pk %s, sk %s): %w", e.Group, d.table, pk, sk, err)
		}
	}
}

// History implements Store with a paginated, strongly consistent Query on begins_with(sk, "history#"),
// oldest first.
func (d *DynamoDB) History(ctx context.Context, group string) ([]HistoryEntry, error) {
	pk, _ := RolloutKey(group)
	keyCond := expression.Key(AttrPK).Equal(expression.Value(pk)).
		And(expression.Key(AttrSK).BeginsWith(skHistoryPrefix))
	expr, err := expression.NewBuilder().WithKeyCondition(keyCond).Build()
	if err != nil {
		return nil, fmt.Errorf("reading history of %s from table %s: building key condition: %w", group, d.table, err)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ConsistentRead:            aws.Bool(true),
		ScanIndexForward:          aws.Bool(true),
	}
	if d.pageSize > 0 {
		in.Limit = aws.Int32(d.pageSize)
	}
	out := []HistoryEntry{}
	pages := dynamodb.NewQueryPaginator(d.api, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading history of %s from table %s (pk %s): %w", group, d.table, pk, err)
		}
		var es []HistoryEntry
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &es); err != nil {
			return nil, fmt.Errorf("reading history of %s from table %s (pk %s): decoding: %w", group, d.table, pk, err)
		}
		out = append(out, es...)
	}
	return out, nil
}

// PutLock implements Store: an unconditional PutItem, so a second pause of the same scope replaces the first.
// A lock with an end carries it twice: Until (RFC 3339, for reading) and AttrUntilNanos (a Number, which the
// guard of PutRolloutUnlessPaused compares).
func (d *DynamoDB) PutLock(ctx context.Context, l Lock) error {
	pk, sk := LockKey(l.Group)
	item, err := lockItem(l)
	if err != nil {
		return fmt.Errorf("writing %s lock: table %s (pk %s, sk %s): %w", l.Scope(), d.table, pk, sk, err)
	}
	if _, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item}); err != nil {
		return fmt.Errorf("writing %s lock: table %s (pk %s, sk %s): %w", l.Scope(), d.table, pk, sk, err)
	}
	return nil
}

// lockItem is l as its table item.
func lockItem(l Lock) (map[string]types.AttributeValue, error) {
	pk, sk := LockKey(l.Group)
	item, err := marshal(l)
	if err != nil {
		return nil, err
	}
	item[AttrPK] = &types.AttributeValueMemberS{Value: pk}
	item[AttrSK] = &types.AttributeValueMemberS{Value: sk}
	item[AttrKind] = &types.AttributeValueMemberS{Value: skLock}
	if !l.Until.IsZero() {
		item[AttrUntilNanos] = &types.AttributeValueMemberN{Value: strconv.FormatInt(untilNanos(l.Until), 10)}
	}
	return item, nil
}

// PutLockIfAbsent implements Store with one PutItem conditional on attribute_not_exists(pk) OR untilNanos <=
// :now (the condition of PutRolloutUnlessPaused's lock checks: an expired lock may be overwritten), asking
// for the item in place on failure (ReturnValuesOnConditionCheckFailure ALL_OLD). A conditional write reads
// the item strongly consistently, and needs no dynamodb:GetItem, which the operator role does not have. When
// the failure carries no item (an older endpoint), the held lock is reported with its scope only.
func (d *DynamoDB) PutLockIfAbsent(ctx context.Context, l Lock, now time.Time) (Lock, bool, error) {
	pk, sk := LockKey(l.Group)
	where := fmt.Sprintf("writing %s lock unless one holds: table %s (pk %s, sk %s)", l.Scope(), d.table, pk, sk)
	item, err := lockItem(l)
	if err != nil {
		return Lock{}, false, fmt.Errorf("%s: %w", where, err)
	}
	cond, err := expression.NewBuilder().WithCondition(expression.Or(
		expression.AttributeNotExists(expression.Name(AttrPK)),
		expression.Name(AttrUntilNanos).LessThanEqual(expression.Value(untilNanos(now))))).Build()
	if err != nil {
		return Lock{}, false, fmt.Errorf("%s: building condition: %w", where, err)
	}
	_, err = d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names(), ExpressionAttributeValues: cond.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		held := Lock{Group: l.Group}
		if len(ccf.Item) == 0 {
			// DynamoDB returns the item that failed the condition (ReturnValuesOnConditionCheckFailure ALL_OLD);
			// an endpoint that does not (an emulator) is answered by one consistent read of the lock item.
			if err := d.get(ctx, pk, sk, &held); err != nil && !errors.Is(err, ErrNotFound) {
				return Lock{}, false, fmt.Errorf("%s: reading the lock in place: %w", where, err)
			}
			held.Group = l.Group
			return held, false, nil
		}
		if err := attributevalue.UnmarshalMap(ccf.Item, &held); err != nil {
			return Lock{}, false, fmt.Errorf("%s: decoding the lock in place: %w", where, err)
		}
		held.Group = l.Group
		return held, false, nil
	case err != nil:
		return Lock{}, false, fmt.Errorf("%s: %w", where, err)
	}
	return Lock{}, true, nil
}

// DeleteLock implements Store with an unconditional DeleteItem: a missing lock is not an error.
func (d *DynamoDB) DeleteLock(ctx context.Context, group string) error {
	pk, sk := LockKey(group)
	_, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(d.table), Key: key(pk, sk)})
	if err != nil {
		return fmt.Errorf("deleting %s lock: table %s (pk %s, sk %s): %w", Lock{Group: group}.Scope(), d.table, pk, sk, err)
	}
	return nil
}

// LiftLock implements Store with one consistent GetItem of the lock item, then one DeleteItem returning the
// item as it was (ReturnValues ALL_OLD): the answer is the item the delete removed, read in the same request,
// never an eventually consistent copy (Amazon DynamoDB API Reference, "DeleteItem", ReturnValues). When the
// delete removed nothing but the read found a lock, that lock is reported lifted: either the SDK sent the
// DeleteItem again after its first answer was lost (the first one removed it), or another resume removed it
// in between; the pause is over either way. A failed read does not stop the delete.
func (d *DynamoDB) LiftLock(ctx context.Context, group string) (Lock, bool, error) {
	pk, sk := LockKey(group)
	var before Lock
	found := d.get(ctx, pk, sk, &before) == nil
	out, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(d.table), Key: key(pk, sk),
		ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return Lock{}, false, fmt.Errorf("deleting %s lock: table %s (pk %s, sk %s): %w", Lock{Group: group}.Scope(), d.table, pk, sk, err)
	}
	if len(out.Attributes) == 0 {
		if found {
			before.Group = group
			return before, true, nil
		}
		return Lock{}, false, nil
	}
	var l Lock
	if err := attributevalue.UnmarshalMap(out.Attributes, &l); err != nil {
		// Deleted all the same: the pause is lifted, only its details are unreadable.
		return Lock{Group: group}, true, nil
	}
	l.Group = group
	return l, true, nil
}

// ListLocks implements Store with a paginated Query of the index IndexKind on kind = "lock": the global
// lock first (its group is GlobalScope, the empty string), then the group locks sorted by group. Like
// ListRollouts, the read is eventually consistent: a pause is seen once the index has it (normally within a
// second), well within the one reconcile tick a pause may take to stop new destructive steps.
func (d *DynamoDB) ListLocks(ctx context.Context) ([]Lock, error) {
	out, err := queryKind[Lock](ctx, d, skLock)
	if err != nil {
		return nil, fmt.Errorf("listing locks in table %s: %w", d.table, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

// MarkEvent implements Store with one PutItem of (event#<id>, event) conditional on attribute_not_exists(pk):
// exactly one of any number of concurrent callers gets first == true. The item's expiresAt is expires in epoch
// seconds, rounded up so that TTL never drops the marker before expires; a zero expires writes no expiresAt
// (the marker is kept). Like the memory store, an expired marker that TTL has not deleted yet still counts.
func (d *DynamoDB) MarkEvent(ctx context.Context, id string, expires time.Time) (bool, error) {
	if id == "" {
		return false, errors.New("marking event: id is empty")
	}
	pk, sk := EventKey(id)
	item := key(pk, sk)
	if !expires.IsZero() {
		item[AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(epochSecondsCeil(expires), 10)}
	}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return false, fmt.Errorf("marking event %s: table %s (pk %s, sk %s): building condition: %w", id, d.table, pk, sk, err)
	}
	_, err = d.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(d.table),
		Item:                      item,
		ConditionExpression:       cond.Condition(),
		ExpressionAttributeNames:  cond.Names(),
		ExpressionAttributeValues: cond.Values(),
	})
	switch {
	case err == nil:
		return true, nil
	case isConditionalCheckFailed(err):
		return false, nil
	default:
		return false, fmt.Errorf("marking event %s: table %s (pk %s, sk %s): %w", id, d.table, pk, sk, err)
	}
}

// EventSeen implements Store: one consistent GetItem on the event's key.
func (d *DynamoDB) EventSeen(ctx context.Context, id string) (bool, error) {
	pk, sk := EventKey(id)
	var out struct{}
	err := d.get(ctx, pk, sk, &out)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	default:
		return false, fmt.Errorf("reading event marker %s: %w", id, err)
	}
}

// epochSecondsCeil returns t in seconds since the Unix epoch, rounded up to a whole second.
func epochSecondsCeil(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// get reads one item with a strongly consistent GetItem and decodes it into v; ErrNotFound when missing.
func (d *DynamoDB) get(ctx context.Context, pk, sk string, v any) error {
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(d.table),
		Key:            key(pk, sk),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return fmt.Errorf("table %s (pk %s, sk %s): %w", d.table, pk, sk, err)
	}
	if len(out.Item) == 0 {
		return fmt.Errorf("table %s (pk %s, sk %s): %w", d.table, pk, sk, ErrNotFound)
	}
	if err := attributevalue.UnmarshalMap(out.Item, v); err != nil {
		return fmt.Errorf("table %s (pk %s, sk %s): decoding: %w", d.table, pk, sk, err)
	}
	return nil
}

// versionedPut returns the Put of record (whose version attribute is already expected+1) under (pk, sk)
// conditional on the stored item's version being expected, or, for expected 0, on no item existing.
func (d *DynamoDB) versionedPut(pk, sk string, expected int64, record any) (*types.Put, error) {
	item, err := marshal(record)
	if err != nil {
		return nil, err
	}
	item[AttrPK] = &types.AttributeValueMemberS{Value: pk}
	item[AttrSK] = &types.AttributeValueMemberS{Value: sk}
	d.stamp(item, sk, record)

	cond := expression.AttributeNotExists(expression.Name(AttrPK))
	if expected != 0 {
		cond = expression.Name(AttrVersion).Equal(expression.Value(expected))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return nil, fmt.Errorf("building condition: %w", err)
	}
	return &types.Put{TableName: aws.String(d.table), Item: item, ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}, nil
}

// putVersioned writes record (whose version attribute is already expected+1) under (pk, sk) if the stored
// item's version equals expected, or, for expected 0, if no item exists. A failed condition is ErrConflict.
func (d *DynamoDB) putVersioned(ctx context.Context, pk, sk string, expected int64, record any) error {
	put, err := d.versionedPut(pk, sk, expected, record)
	if err != nil {
		return fmt.Errorf("table %s (pk %s, sk %s): %w", d.table, pk, sk, err)
	}
	_, err = d.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 put.TableName,
		Item:                      put.Item,
		ConditionExpression:       put.ConditionExpression,
		ExpressionAttributeNames:  put.ExpressionAttributeNames,
		ExpressionAttributeValues: put.ExpressionAttributeValues,
	})
	switch {
	case err == nil:
		return nil
	case isConditionalCheckFailed(err):
		return fmt.Errorf("table %s (pk %s, sk %s): %w: %w", d.table, pk, sk, ErrConflict, err)
	default:
		return fmt.Errorf("table %s (pk %s, sk %s): %w", d.table, pk, sk, err)
	}
}

// marshal encodes a record, leaving out zero times (the decoder restores them as zero).
func marshal(v any) (map[string]types.AttributeValue, error) {
	item, err := attributevalue.MarshalMapWithOptions(v, func(o *attributevalue.EncoderOptions) {
		o.OmitEmptyTime = true
	})
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	return item, nil
}

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrPK: &types.AttributeValueMemberS{Value: pk},
		AttrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

// isConditionalCheckFailed reports whether err is DynamoDB's answer to a write whose condition was false.
func isConditionalCheckFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return true
	}
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ConditionalCheckFailedException"
}

// CreateTable creates the agent's table (on-demand capacity, string keys pk (HASH) and sk (RANGE), the index
// IndexKind) and waits
// until it is ACTIVE, at most 5 minutes or until ctx ends. A table that already exists is accepted when its
// key schema matches and it has the index, so set-up can run again; one with another key schema or without the
// index is an error.
// Time to live on AttrExpiresAt and point-in-time recovery are not set here: the CloudFormation template
// enables them (docs/state.md).
func CreateTable(ctx context.Context, api TableAPI, table string) error {
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrSK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrKind), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{kindIndex()},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("creating table %s: %w", table, err)
	}
	waiter := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 2 * time.Second
		o.MaxDelay = 20 * time.Second
	})
	out, err := waiter.WaitForOutput(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, tableWait)
	if err != nil {
		return fmt.Errorf("waiting for table %s to become ACTIVE: %w", table, err)
	}
	if got := keySchema(out.Table); got != "pk:HASH,sk:RANGE" {
		return fmt.Errorf("table %s exists with key schema %q, want pk:HASH,sk:RANGE", table, got)
	}
	if !hasKindIndex(out.Table) {
		return fmt.Errorf("table %s has no index %s (hash %s, range %s): ListRollouts and ListLocks query it (docs/state.md)", table, IndexKind, AttrKind, AttrPK)
	}
	return nil
}

// keySchema renders a table's key schema as "name:TYPE,..." for comparison and error messages.
func keySchema(t *types.TableDescription) string {
	if t == nil {
		return ""
	}
	parts := make([]string, 0, len(t.KeySchema))
	for _, k := range t.KeySchema {
		parts = append(parts, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
	}
	sort.Strings(parts) // independent of the order DescribeTable lists the keys in
	return strings.Join(parts, ",")
}

// PutDrainMark implements Store: an unconditional PutItem (a newer drain of the instance replaces the mark).
func (d *DynamoDB) PutDrainMark(ctx context.Context, m DrainMark) error {
	if m.InstanceID == "" {
		return errors.New("writing drain mark: instance id is empty")
	}
	pk, sk := DrainMarkKey(m.InstanceID)
	item, err := marshal(m)
	if err != nil {
		return fmt.Errorf("writing drain mark of %s: table %s (pk %s, sk %s): %w", m.InstanceID, d.table, pk, sk, err)
	}
	item[AttrPK] = &types.AttributeValueMemberS{Value: pk}
	item[AttrSK] = &types.AttributeValueMemberS{Value: sk}
	if _, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item}); err != nil {
		return fmt.Errorf("writing drain mark of %s: table %s (pk %s, sk %s): %w", m.InstanceID, d.table, pk, sk, err)
	}
	return nil
}

// DeleteDrainMark implements Store with an unconditional DeleteItem: a missing mark is not an error.
func (d *DynamoDB) DeleteDrainMark(ctx context.Context, instanceID string) error {
	pk, sk := DrainMarkKey(instanceID)
	if _, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(d.table), Key: key(pk, sk)}); err != nil {
		return fmt.Errorf("deleting drain mark of %s: table %s (pk %s, sk %s): %w", instanceID, d.table, pk, sk, err)
	}
	return nil
}

// ListDrainMarks implements Store with a paginated, strongly consistent Query of the marks' partition.
func (d *DynamoDB) ListDrainMarks(ctx context.Context) ([]DrainMark, error) {
	keyCond := expression.Key(AttrPK).Equal(expression.Value(pkDrainMarks)).
		And(expression.Key(AttrSK).BeginsWith(skDrainPrefix))
	expr, err := expression.NewBuilder().WithKeyCondition(keyCond).Build()
	if err != nil {
		return nil, fmt.Errorf("listing drain marks in table %s: building key condition: %w", d.table, err)
	}
	in := &dynamodb.QueryInput{TableName: aws.String(d.table), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true)}
	if d.pageSize > 0 {
		in.Limit = aws.Int32(d.pageSize)
	}
	out := []DrainMark{}
	pages := dynamodb.NewQueryPaginator(d.api, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing drain marks in table %s: %w", d.table, err)
		}
		var ms []DrainMark
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &ms); err != nil {
			return nil, fmt.Errorf("listing drain marks in table %s: decoding: %w", d.table, err)
		}
		out = append(out, ms...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].InstanceID < out[j].InstanceID })
	return out, nil
}
