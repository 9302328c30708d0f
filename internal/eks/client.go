package eks

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Client-side limits of the Kubernetes client (client-go's defaults of 5 QPS / burst 10 would make a drain
// of a busy node wait on the client itself).
const (
	defaultQPS     = 20
	defaultBurst   = 40
	requestTimeout = 30 * time.Second
)

// ClientProvider builds one Kubernetes clientset per EKS cluster: the API endpoint and certificate authority
// from DescribeCluster, and every request authenticated with a bearer token from Tokens (refreshed before it
// expires, so the clientset is built once). It implements providers.KubeClients. Safe for concurrent use.
type ClientProvider struct {
	Clusters *Clusters
	Tokens   *TokenSource
	// UserAgent of the requests. Default "patch-agent".
	UserAgent string

	mu      sync.Mutex
	clients map[string]kubernetes.Interface
}

// ClientFor returns the clientset of cluster. Errors: the cluster cannot be described, has no endpoint or
// certificate authority yet (CREATING), or the client cannot be built.
func (p *ClientProvider) ClientFor(ctx context.Context, cluster string) (kubernetes.Interface, error) {
	p.mu.Lock()
	c := p.clients[cluster]
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	info, err := p.Clusters.Describe(ctx, cluster)
	if err != nil {
		return nil, err
	}
	if info.Endpoint == "" || len(info.CAData) == 0 {
		return nil, fmt.Errorf("EKS cluster %s (status %s) has no API endpoint or certificate authority yet", cluster, info.Status)
	}
	cfg := RESTConfig(info, p.Tokens)
	if p.UserAgent != "" {
		cfg.UserAgent = p.UserAgent
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes client for EKS cluster %s: %w", cluster, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients == nil {
		p.clients = map[string]kubernetes.Interface{}
	}
	if existing := p.clients[cluster]; existing != nil {
		return existing, nil
	}
	p.clients[cluster] = cs
	return cs, nil
}

// RESTConfig returns the client configuration of a described cluster whose requests carry a token from
// tokens.
func RESTConfig(c Cluster, tokens *TokenSource) *rest.Config {
	cluster := c.Name
	return &rest.Config{
		Host:            c.Endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData},
		QPS:             defaultQPS,
		Burst:           defaultBurst,
		Timeout:         requestTimeout,
		UserAgent:       "patch-agent",
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return &bearerRoundTripper{next: rt, tokens: tokens, cluster: cluster}
		},
	}
}

// bearerRoundTripper adds "Authorization: Bearer <EKS token>" to every request.
type bearerRoundTripper struct {
	next    http.RoundTripper
	tokens  *TokenSource
	cluster string
}

func (b *bearerRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	t, err := b.tokens.Token(req.Context(), b.cluster)
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+t.Value)
	return b.next.RoundTrip(r)
}
