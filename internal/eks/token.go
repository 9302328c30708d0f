// Package eks gives the agent what it needs from Amazon EKS beyond the nodes themselves: a Kubernetes client
// per cluster (API endpoint and certificate authority from DescribeCluster, authenticated with a bearer token
// made from a presigned STS GetCallerIdentity request, as `aws eks get-token` does), the cluster's Kubernetes
// version, and the public SSM parameter path of the EKS-optimized AMI for a cluster version, AMI family and
// architecture (the `auto` AMI source).
package eks

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"k8s.io/utils/clock"
)

// Token format of the EKS authenticator (aws-iam-authenticator, `aws eks get-token`).
const (
	// TokenPrefix starts every token: "k8s-aws-v1." + base64url (no padding) of the presigned URL.
	TokenPrefix = "k8s-aws-v1."
	// ClusterIDHeader names the cluster in the signed request, so a token for one cluster is refused by
	// another.
	ClusterIDHeader = "x-k8s-aws-id"
	// presignExpiresSeconds is the X-Amz-Expires of the presigned URL, as aws-iam-authenticator sets it.
	presignExpiresSeconds = "60"
	// TokenLifetime is how long EKS accepts a token after it was signed (15 minutes, whatever X-Amz-Expires
	// says); Token.Expiration keeps one minute of margin below it, as the authenticator's client does.
	TokenLifetime = 15 * time.Minute
	// RefreshBefore is how long before Token.Expiration a cached token is replaced.
	RefreshBefore = time.Minute
	// emptySHA256 is the payload hash of a request without a body.
	emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// Token is a bearer token for one cluster's Kubernetes API.
type Token struct {
	Value string
	// Expiration is when the token must no longer be used (signing time + 14 minutes).
	Expiration time.Time
}

// STSEndpoint returns the regional STS endpoint of a region ("https://sts.us-east-1.amazonaws.com"; China
// regions end in amazonaws.com.cn).
func STSEndpoint(region string) string {
	suffix := "amazonaws.com"
	if strings.HasPrefix(region, "cn-") {
		suffix = "amazonaws.com.cn"
	}
	return fmt.Sprintf("https://sts.%s.%s", region, suffix)
}

// PresignToken builds the token of cluster from a GetCallerIdentity request to endpoint (STSEndpoint(region)
// when empty), presigned with creds at signingTime: the cluster name in the signed x-k8s-aws-id header,
// X-Amz-Expires=60. It returns an error when cluster or region is empty or signing fails.
func PresignToken(ctx context.Context, creds aws.Credentials, region, endpoint, cluster string, signingTime time.Time) (Token, error) {
	if cluster == "" {
		return Token{}, fmt.Errorf("presigning EKS token: cluster name is empty")
	}
	if region == "" {
		return Token{}, fmt.Errorf("presigning EKS token for cluster %s: region is empty", cluster)
	}
	if endpoint == "" {
		endpoint = STSEndpoint(region)
	}
	url := strings.TrimSuffix(endpoint, "/") + "/?Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Expires=" + presignExpiresSeconds
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Token{}, fmt.Errorf("presigning EKS token for cluster %s: %w", cluster, err)
	}
	req.Header.Set(ClusterIDHeader, cluster)
	signed, _, err := v4.NewSigner().PresignHTTP(ctx, creds, req, emptySHA256, "sts", region, signingTime.UTC())
	if err != nil {
		return Token{}, fmt.Errorf("presigning EKS token for cluster %s: %w", cluster, err)
	}
	return Token{
		Value:      TokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(signed)),
		Expiration: signingTime.Add(TokenLifetime - time.Minute),
	}, nil
}

// TokenSource makes and caches one token per cluster, replacing it RefreshBefore its expiration. Safe for
// concurrent use.
type TokenSource struct {
	// Credentials sign the requests (the agent's role; aws.Config.Credentials).
	Credentials aws.CredentialsProvider
	// Region is the region of the STS endpoint (the agent's region).
	Region string
	// Endpoint overrides the STS endpoint (default STSEndpoint(Region)).
	Endpoint string
	// Clock is the signing clock. Default: the real clock.
	Clock clock.PassiveClock

	mu    sync.Mutex
	cache map[string]Token
}

// Token returns a token for cluster that stays valid for at least RefreshBefore.
func (s *TokenSource) Token(ctx context.Context, cluster string) (Token, error) {
	clk := s.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	now := clk.Now()
	s.mu.Lock()
	if t, ok := s.cache[cluster]; ok && now.Before(t.Expiration.Add(-RefreshBefore)) {
		s.mu.Unlock()
		return t, nil
	}
	s.mu.Unlock()
	if s.Credentials == nil {
		return Token{}, fmt.Errorf("EKS token for cluster %s: no AWS credentials", cluster)
	}
	creds, err := s.Credentials.Retrieve(ctx)
	if err != nil {
		return Token{}, fmt.Errorf("EKS token for cluster %s: retrieving AWS credentials: %w", cluster, err)
	}
	t, err := PresignToken(ctx, creds, s.Region, s.Endpoint, cluster, now)
	if err != nil {
		return Token{}, err
	}
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[string]Token{}
	}
	s.cache[cluster] = t
	s.mu.Unlock()
	return t, nil
}
