package providers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/model"
)

// KubeClients gives the Kubernetes API of an EKS cluster by cluster name (internal/eks.ClientProvider in
// production: endpoint and certificate authority from DescribeCluster, a presigned STS token; a fake
// clientset in the demo). Implementations return the same client for a cluster every time.
type KubeClients interface {
	ClientFor(ctx context.Context, cluster string) (kubernetes.Interface, error)
}

// EKSPlatform drains the nodes of EKS clusters (self-managed node groups): cordon, then eviction of every pod
// but DaemonSet and mirror pods through the Eviction API, PodDisruptionBudgets honoured (internal/eksdrain).
// A node is matched to its EC2 instance by its provider ID; it is healthy when its Ready condition is True.
// One Drainer per cluster keeps the eviction backoffs, so one EKSPlatform lives as long as the agent.
type EKSPlatform struct {
	clients KubeClients
	opts    eksdrain.Options

	mu       sync.Mutex
	drainers map[string]*eksdrain.Drainer
}

var _ model.Platform = (*EKSPlatform)(nil)

// NewEKSPlatform returns the EKS platform on the given clients and drain options.
func NewEKSPlatform(clients KubeClients, opts eksdrain.Options) *EKSPlatform {
	return &EKSPlatform{clients: clients, opts: opts, drainers: map[string]*eksdrain.Drainer{}}
}

// Drainer returns the drainer of a cluster, creating it on first use.
func (p *EKSPlatform) Drainer(ctx context.Context, cluster string) (*eksdrain.Drainer, error) {
	p.mu.Lock()
	d := p.drainers[cluster]
	p.mu.Unlock()
	if d != nil {
		return d, nil
	}
	client, err := p.clients.ClientFor(ctx, cluster)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes API of EKS cluster %s: %w", cluster, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d = p.drainers[cluster]; d == nil {
		d = eksdrain.New(client, p.opts)
		p.drainers[cluster] = d
	}
	return d, nil
}

// Observe implements Platform: every node of the cluster with an AWS provider ID, in one listing.
func (p *EKSPlatform) Observe(ctx context.Context, cluster string) (map[string]model.NodeState, error) {
	d, err := p.Drainer(ctx, cluster)
	if err != nil {
		return nil, err
	}
	nodes, err := d.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("EKS cluster %s: %w", cluster, err)
	}
	out := make(map[string]model.NodeState, len(nodes))
	for id, n := range nodes {
		out[id] = model.NodeState{Registered: true, Healthy: n.Healthy(), Draining: n.Unschedulable, Name: n.Name, Status: n.Status()}
	}
	return out, nil
}

// StartDrain implements Platform: cordon and a first round of evictions. An instance without a node has
// nothing to drain.
func (p *EKSPlatform) StartDrain(ctx context.Context, cluster, instanceID string) error {
	d, err := p.Drainer(ctx, cluster)
	if err != nil {
		return err
	}
	node, err := d.Find(ctx, instanceID)
	if errors.Is(err, eksdrain.ErrNotRegistered) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = d.StartDrain(ctx, node)
	return err
}

// DrainStatus implements Platform: evictions whose backoff passed are asked again; drained when no pod to
// move is left. An instance without a node (never joined, or its node object deleted) is drained.
func (p *EKSPlatform) DrainStatus(ctx context.Context, cluster, instanceID string) (model.DrainProgress, error) {
	d, err := p.Drainer(ctx, cluster)
	if err != nil {
		return model.DrainProgress{}, err
	}
	node, err := d.Find(ctx, instanceID)
	if errors.Is(err, eksdrain.ErrNotRegistered) {
		return model.DrainProgress{Drained: true, Detail: "no Kubernetes node for the instance"}, nil
	}
	if err != nil {
		return model.DrainProgress{}, err
	}
	st, err := d.DrainStatus(ctx, node)
	if err != nil {
		return model.DrainProgress{}, err
	}
	return model.DrainProgress{Drained: st.Drained, Remaining: st.Remaining, Detail: "node " + node.Name + ": " + st.Detail}, nil
}

// Undrain implements Platform: uncordon. The evicted pods stay wherever they were rescheduled.
func (p *EKSPlatform) Undrain(ctx context.Context, cluster, instanceID string) error {
	d, err := p.Drainer(ctx, cluster)
	if err != nil {
		return err
	}
	node, err := d.Find(ctx, instanceID)
	if errors.Is(err, eksdrain.ErrNotRegistered) {
		return nil
	}
	if err != nil {
		return err
	}
	return d.Uncordon(ctx, node)
}
