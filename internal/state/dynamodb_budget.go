package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const (
	pkBudgetPrefix = "budget#"
	skBudget       = "budget"
)

// ClusterBudgetKey returns the primary key (pk, sk) of a cluster's budget record: ("budget#<platform>/<name>",
// "budget").
func ClusterBudgetKey(cluster string) (pk, sk string) { return pkBudgetPrefix + cluster, skBudget }

// GetClusterBudget implements Store (a consistent read, so a claim sees every claim written before it).
func (d *DynamoDB) GetClusterBudget(ctx context.Context, cluster string) (ClusterBudget, error) {
	pk, sk := ClusterBudgetKey(cluster)
	var b ClusterBudget
	if err := d.get(ctx, pk, sk, &b); err != nil {
		return ClusterBudget{}, fmt.Errorf("reading the budget of cluster %s: %w", cluster, err)
	}
	return b, nil
}

// PutClusterBudget implements Store: one PutItem conditional on the version read (attribute_not_exists(pk)
// for version 0), so two replicas that claim the last slot at once cannot both succeed (Amazon DynamoDB
// Developer Guide, "Condition expressions"; ConditionalCheckFailedException becomes ErrConflict).
func (d *DynamoDB) PutClusterBudget(ctx context.Context, b ClusterBudget) (ClusterBudget, error) {
	if b.Cluster == "" {
		return ClusterBudget{}, errors.New("writing a cluster budget: cluster is empty")
	}
	stored := b
	stored.Version, stored.Fence = b.Version+1, nil
	pk, sk := ClusterBudgetKey(b.Cluster)
	if b.Fence != nil {
		if err := d.putFencedBudget(ctx, b, stored); err != nil {
			return ClusterBudget{}, err
		}
		return stored, nil
	}
	if err := d.putVersioned(ctx, pk, sk, b.Version, stored); err != nil {
		return ClusterBudget{}, fmt.Errorf("writing the budget of cluster %s at version %d: %w", b.Cluster, b.Version, err)
	}
	return stored, nil
}

// putFencedBudget writes stored (b at its next version) in one TransactWriteItems: the budget Put conditional on
// b.Version and a ConditionCheck that the rollout record of b.Fence.Group is at b.Fence.Version (Amazon DynamoDB
// API Reference, TransactWriteItems, ConditionCheck). A failed budget condition is ErrConflict; a failed fence
// is ErrFenceMoved and ErrConflict.
func (d *DynamoDB) putFencedBudget(ctx context.Context, b, stored ClusterBudget) error {
	f := b.Fence
	where := fmt.Sprintf("writing the budget of cluster %s at version %d, fenced by the rollout of %s at version %d", b.Cluster, b.Version, f.Group, f.Version)
	pk, sk := ClusterBudgetKey(b.Cluster)
	put, err := d.versionedPut(pk, sk, b.Version, stored)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	at, err := expression.NewBuilder().WithCondition(expression.Name(AttrVersion).Equal(expression.Value(f.Version))).Build()
	if err != nil {
		return fmt.Errorf("%s: building the fence: %w", where, err)
	}
	rpk, rsk := RolloutKey(f.Group)
	_, err = d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: put},
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String(d.table), Key: key(rpk, rsk), ConditionExpression: at.Condition(),
			ExpressionAttributeNames: at.Names(), ExpressionAttributeValues: at.Values()}},
	}})
	failed := canceledOnCondition(err)
	switch {
	case err == nil:
		return nil
	case len(failed) > 1 && failed[1]:
		return fmt.Errorf("%s: %w: %w", where, ErrFenceMoved, ErrConflict)
	case len(failed) > 0 && failed[0]:
		return fmt.Errorf("%s: %w: %w", where, ErrConflict, err)
	default:
		return fmt.Errorf("%s: %w", where, err)
	}
}
