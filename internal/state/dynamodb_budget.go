package state

import (
	"context"
	"errors"
	"fmt"
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
	stored.Version = b.Version + 1
	pk, sk := ClusterBudgetKey(b.Cluster)
	if err := d.putVersioned(ctx, pk, sk, b.Version, stored); err != nil {
		return ClusterBudget{}, fmt.Errorf("writing the budget of cluster %s at version %d: %w", b.Cluster, b.Version, err)
	}
	return stored, nil
}
