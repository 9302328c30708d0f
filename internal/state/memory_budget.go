package state

import (
	"context"
	"fmt"
	"slices"
)

// GetClusterBudget implements Store.
func (m *Memory) GetClusterBudget(_ context.Context, cluster string) (ClusterBudget, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.budgets[cluster]
	if !ok {
		return ClusterBudget{}, fmt.Errorf("budget of cluster %s: %w", cluster, ErrNotFound)
	}
	b.Slots = slices.Clone(b.Slots)
	return b, nil
}

// PutClusterBudget implements Store: the version check and the write under one lock.
func (m *Memory) PutClusterBudget(_ context.Context, b ClusterBudget) (ClusterBudget, error) {
	if b.Cluster == "" {
		return ClusterBudget{}, fmt.Errorf("writing a cluster budget: cluster is empty")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.budgets[b.Cluster]
	if (!ok && b.Version != 0) || (ok && cur.Version != b.Version) {
		return ClusterBudget{}, fmt.Errorf("budget of cluster %s at version %d: %w", b.Cluster, b.Version, ErrConflict)
	}
	if f := b.Fence; f != nil {
		if r, ok := m.rollouts[f.Group]; !ok || r.Version != f.Version {
			return ClusterBudget{}, fmt.Errorf("budget of cluster %s fenced by the rollout of %s at version %d: %w: %w", b.Cluster, f.Group, f.Version, ErrFenceMoved, ErrConflict)
		}
	}
	return m.putBudgetLocked(b), nil
}

// putBudgetLocked stores b at the next version, its version checked by the caller, and returns it as stored.
func (m *Memory) putBudgetLocked(b ClusterBudget) ClusterBudget {
	if m.budgets == nil {
		m.budgets = map[string]ClusterBudget{}
	}
	b.Version++
	b.Fence = nil
	b.Slots = slices.Clone(b.Slots)
	m.budgets[b.Cluster] = b
	out := b
	out.Slots = slices.Clone(b.Slots)
	return out
}
