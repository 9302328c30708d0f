package eks

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// ErrClusterNotFound is returned for a cluster name EKS does not know (ResourceNotFoundException).
var ErrClusterNotFound = errors.New("EKS cluster not found")

// DefaultClusterTTL is how long a described cluster is reused before DescribeCluster is called again.
const DefaultClusterTTL = 5 * time.Minute

// Cluster is what the agent needs of an EKS cluster.
type Cluster struct {
	Name string
	// Version is the control plane's Kubernetes version ("1.31").
	Version string
	// Endpoint is the Kubernetes API server URL.
	Endpoint string
	// CAData is the PEM certificate authority of the API server.
	CAData []byte
	// Status is CREATING, ACTIVE, UPDATING, DELETING, FAILED or PENDING.
	Status string
}

// Clusters describes EKS clusters with DescribeCluster and caches each for TTL. When a call fails and an
// earlier description exists, the earlier one is returned (a transient EKS error does not stop rollouts);
// a cluster that no longer exists is an error at once. Safe for concurrent use.
type Clusters struct {
	API awsapi.EKS
	// TTL defaults to DefaultClusterTTL.
	TTL time.Duration
	// Clock defaults to the real clock.
	Clock clock.PassiveClock

	mu    sync.Mutex
	cache map[string]cachedCluster
}

type cachedCluster struct {
	c  Cluster
	at time.Time
}

// Describe returns the cluster, from the cache when fresh. Errors: ErrClusterNotFound (wrapped), or the
// DescribeCluster error when nothing is cached.
func (cs *Clusters) Describe(ctx context.Context, name string) (Cluster, error) {
	clk, ttl := cs.Clock, cs.TTL
	if clk == nil {
		clk = clock.RealClock{}
	}
	if ttl <= 0 {
		ttl = DefaultClusterTTL
	}
	now := clk.Now()
	cs.mu.Lock()
	cached, ok := cs.cache[name]
	cs.mu.Unlock()
	if ok && now.Sub(cached.at) < ttl {
		return cached.c, nil
	}
	out, err := cs.API.DescribeCluster(ctx, &awseks.DescribeClusterInput{Name: aws.String(name)})
	var notFound *ekstypes.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		cs.forget(name)
		return Cluster{}, fmt.Errorf("describing EKS cluster %s: %w", name, ErrClusterNotFound)
	case err != nil && ok:
		return cached.c, nil
	case err != nil:
		return Cluster{}, fmt.Errorf("describing EKS cluster %s: %w", name, err)
	case out.Cluster == nil:
		return Cluster{}, fmt.Errorf("describing EKS cluster %s: empty response", name)
	}
	c := Cluster{Name: name, Version: aws.ToString(out.Cluster.Version), Endpoint: aws.ToString(out.Cluster.Endpoint),
		Status: string(out.Cluster.Status)}
	if ca := out.Cluster.CertificateAuthority; ca != nil && aws.ToString(ca.Data) != "" {
		pem, err := base64.StdEncoding.DecodeString(aws.ToString(ca.Data))
		if err != nil {
			return Cluster{}, fmt.Errorf("EKS cluster %s: certificate authority data is not base64: %w", name, err)
		}
		c.CAData = pem
	}
	cs.mu.Lock()
	if cs.cache == nil {
		cs.cache = map[string]cachedCluster{}
	}
	cs.cache[name] = cachedCluster{c: c, at: now}
	cs.mu.Unlock()
	return c, nil
}

func (cs *Clusters) forget(name string) {
	cs.mu.Lock()
	delete(cs.cache, name)
	cs.mu.Unlock()
}
