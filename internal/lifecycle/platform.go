package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
)

// NodeState is what a platform knows of one instance: whether it joined the cluster, can take work, is
// being drained.
type NodeState struct {
	Registered bool   `json:"registered"`       // joined the cluster (ECS container instance / Kubernetes node)
	Healthy    bool   `json:"healthy"`          // can take work: ECS ACTIVE with agent connected / node Ready
	Draining   bool   `json:"draining"`         // ECS DRAINING / node cordoned
	Name       string `json:"name,omitempty"`   // container instance ARN / node name
	Status     string `json:"status,omitempty"` // platform status word (ACTIVE, DRAINING, Ready, ...)
}

// DrainProgress is the result of one look at a drain.
type DrainProgress struct {
	Drained bool
	// Remaining counts the workloads that still block the drain (non-daemon tasks not STOPPED / pods not evicted).
	Remaining int
	Detail    string
}

// Platform is what differs between ECS and EKS: how instances join, drain and report health. Implementations
// are idempotent: StartDrain on a draining instance and Undrain on an active one do nothing.
type Platform interface {
	// Observe returns the state of every instance of cluster that has joined it, keyed by EC2 instance id.
	Observe(ctx context.Context, cluster string) (map[string]NodeState, error)
	// StartDrain stops new work landing on the instance and moves its work elsewhere.
	StartDrain(ctx context.Context, cluster, instanceID string) error
	// DrainStatus reports whether the instance's work has left.
	DrainStatus(ctx context.Context, cluster, instanceID string) (DrainProgress, error)
	// Undrain puts a drained instance back in service (a drain abandoned at its deadline).
	Undrain(ctx context.Context, cluster, instanceID string) error
}

// Platforms maps a platform name (PlatformECS, PlatformEKS) to its implementation.
type Platforms map[string]Platform

// For returns the platform of target t, or an error naming the platform nobody implements.
func (p Platforms) For(t Target) (Platform, error) {
	if impl, ok := p[t.Platform]; ok && impl != nil {
		return impl, nil
	}
	return nil, fmt.Errorf("group %s: platform %q is not available in this agent", t.Group, t.Platform)
}

// ECSPlatform drains ECS container instances through DRAINING (internal/ecsdrain).
type ECSPlatform struct {
	Drainer *ecsdrain.Drainer
}

var _ Platform = ECSPlatform{}

// Observe implements Platform: every container instance of the cluster, in one listing.
func (p ECSPlatform) Observe(ctx context.Context, cluster string) (map[string]NodeState, error) {
	all, err := p.Drainer.FindAll(ctx, cluster)
	if err != nil {
		return nil, err
	}
	out := make(map[string]NodeState, len(all))
	for id, ci := range all {
		out[id] = NodeState{Registered: true, Healthy: ci.Healthy(), Draining: ci.Status == "DRAINING", Name: ci.ARN, Status: ci.Status}
	}
	return out, nil
}

// StartDrain implements Platform. An instance that never registered has nothing to drain.
func (p ECSPlatform) StartDrain(ctx context.Context, cluster, instanceID string) error {
	ci, err := p.Drainer.Find(ctx, cluster, instanceID)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return nil
	}
	if err != nil {
		return err
	}
	return p.Drainer.StartDrainFound(ctx, cluster, ci) // ci was just described
}

// DrainStatus implements Platform. An instance that is not (or no longer) registered is drained.
func (p ECSPlatform) DrainStatus(ctx context.Context, cluster, instanceID string) (DrainProgress, error) {
	ci, err := p.Drainer.Find(ctx, cluster, instanceID)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return DrainProgress{Drained: true, Detail: "no container instance registered"}, nil
	}
	if err != nil {
		return DrainProgress{}, err
	}
	if ci.Status != "DRAINING" {
		return DrainProgress{Detail: fmt.Sprintf("container instance is %s, not DRAINING", ci.Status)}, nil
	}
	st, err := p.Drainer.Status(ctx, cluster, ci)
	if err != nil {
		return DrainProgress{}, err
	}
	detail := fmt.Sprintf("%d task(s) not yet STOPPED (%v)", st.Remaining, st.ByLastStatus)
	if st.Standalone > 0 { // issue #18: ECS never moves these; they are never counted as drained
		detail += fmt.Sprintf("; %d of them standalone (started by no service, e.g. RunTask or AWS Batch): ECS does not move them, they must end by themselves", st.Standalone)
	}
	return DrainProgress{Drained: st.Drained, Remaining: st.Remaining, Detail: detail}, nil
}

// Undrain implements Platform.
func (p ECSPlatform) Undrain(ctx context.Context, cluster, instanceID string) error {
	ci, err := p.Drainer.Find(ctx, cluster, instanceID)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return nil
	}
	if err != nil {
		return err
	}
	return p.Drainer.UndrainFound(ctx, cluster, ci)
}
