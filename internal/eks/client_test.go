package eks

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// fakeEKS answers DescribeCluster from a map and counts the calls.
type fakeEKS struct {
	mu       sync.Mutex
	clusters map[string]ekstypes.Cluster
	err      error
	calls    int
}

var _ awsapi.EKS = (*fakeEKS)(nil)

func (f *fakeEKS) DescribeCluster(_ context.Context, in *awseks.DescribeClusterInput, _ ...func(*awseks.Options)) (*awseks.DescribeClusterOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	c, ok := f.clusters[aws.ToString(in.Name)]
	if !ok {
		return nil, &ekstypes.ResourceNotFoundException{Message: aws.String("No cluster found for name: " + aws.ToString(in.Name) + ".")}
	}
	return &awseks.DescribeClusterOutput{Cluster: &c}, nil
}

func TestClientForTalksToTheClusterEndpointWithItsCAAndAnEKSToken(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"31","gitVersion":"v1.31.4-eks-2d5f260"}`))
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	api := &fakeEKS{clusters: map[string]ekstypes.Cluster{"prod": {Name: aws.String("prod"), Version: aws.String("1.31"),
		Endpoint: aws.String(srv.URL), Status: ekstypes.ClusterStatusActive,
		CertificateAuthority: &ekstypes.Certificate{Data: aws.String(base64.StdEncoding.EncodeToString(ca))}}}}
	clk := testingclock.NewFakeClock(signedAt)
	p := &ClientProvider{Clusters: &Clusters{API: api, Clock: clk},
		Tokens: &TokenSource{Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), Region: "us-west-2", Clock: clk}}

	cs, err := p.ClientFor(context.Background(), "prod")
	require.NoError(t, err)
	v, err := cs.Discovery().ServerVersion()
	require.NoError(t, err, "TLS verified against the cluster's certificate authority")
	require.Equal(t, "v1.31.4-eks-2d5f260", v.GitVersion)
	again, err := p.ClientFor(context.Background(), "prod")
	require.NoError(t, err)
	require.Same(t, cs, again, "one client per cluster")
	require.Equal(t, 1, api.calls)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, auth)
	token, ok := strings.CutPrefix(auth[0], "Bearer ")
	require.True(t, ok, auth[0])
	require.Contains(t, decode(t, token).Query().Get("X-Amz-SignedHeaders"), ClusterIDHeader)
}

func TestClustersCacheAndTheirErrors(t *testing.T) {
	clk := testingclock.NewFakeClock(signedAt)
	api := &fakeEKS{clusters: map[string]ekstypes.Cluster{"prod": {Name: aws.String("prod"), Version: aws.String("1.30"), Endpoint: aws.String("https://x")}}}
	cs := &Clusters{API: api, Clock: clk}
	ctx := context.Background()
	c, err := cs.Describe(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, "1.30", c.Version)
	_, err = cs.Describe(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, 1, api.calls, "cached")

	api.err = errors.New("throttled")
	clk.Step(DefaultClusterTTL)
	c, err = cs.Describe(ctx, "prod")
	require.NoError(t, err, "a transient error keeps the last description")
	require.Equal(t, "1.30", c.Version)

	api.err = nil
	_, err = cs.Describe(ctx, "gone")
	require.ErrorIs(t, err, ErrClusterNotFound)

	p := &ClientProvider{Clusters: &Clusters{API: &fakeEKS{clusters: map[string]ekstypes.Cluster{"new": {Name: aws.String("new"), Status: ekstypes.ClusterStatusCreating}}}}}
	_, err = p.ClientFor(ctx, "new")
	require.ErrorContains(t, err, "EKS cluster new (status CREATING) has no API endpoint or certificate authority yet")
}
