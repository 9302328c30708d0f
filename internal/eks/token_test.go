package eks

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"
)

var signedAt = time.Date(2026, 11, 30, 9, 15, 30, 0, time.UTC)

// decode returns the presigned URL inside a token.
func decode(t *testing.T, token string) *url.URL {
	t.Helper()
	require.True(t, strings.HasPrefix(token, TokenPrefix), token)
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, TokenPrefix))
	require.NoError(t, err, "base64url without padding")
	u, err := url.Parse(string(raw))
	require.NoError(t, err)
	return u
}

func TestTokenIsAPresignedGetCallerIdentityWithTheClusterHeaderSigned(t *testing.T) {
	creds := aws.Credentials{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", SessionToken: "session-token"}
	tok, err := PresignToken(context.Background(), creds, "us-west-2", "", "prod-cluster", signedAt)
	require.NoError(t, err)
	require.NotContains(t, tok.Value, "=", "no base64 padding")
	require.Equal(t, signedAt.Add(14*time.Minute), tok.Expiration)

	u := decode(t, tok.Value)
	q := u.Query()
	require.Equal(t, "https", u.Scheme)
	require.Equal(t, "sts.us-west-2.amazonaws.com", u.Host)
	require.Equal(t, "GetCallerIdentity", q.Get("Action"))
	require.Equal(t, "2011-06-15", q.Get("Version"))
	require.Equal(t, "60", q.Get("X-Amz-Expires"))
	require.Equal(t, "AWS4-HMAC-SHA256", q.Get("X-Amz-Algorithm"))
	require.Equal(t, "20261130T091530Z", q.Get("X-Amz-Date"))
	require.Equal(t, "AKIAIOSFODNN7EXAMPLE/20261130/us-west-2/sts/aws4_request", q.Get("X-Amz-Credential"))
	require.Equal(t, "session-token", q.Get("X-Amz-Security-Token"))
	require.Contains(t, strings.Split(q.Get("X-Amz-SignedHeaders"), ";"), ClusterIDHeader, "the cluster name is signed")
	require.Contains(t, strings.Split(q.Get("X-Amz-SignedHeaders"), ";"), "host")
	require.Len(t, q.Get("X-Amz-Signature"), 64)
	require.Empty(t, q.Get(ClusterIDHeader), "the cluster name travels as a header, not in the query")

	// Same inputs, same signature; another cluster, another signature.
	again, err := PresignToken(context.Background(), creds, "us-west-2", "", "prod-cluster", signedAt)
	require.NoError(t, err)
	require.Equal(t, tok.Value, again.Value)
	other, err := PresignToken(context.Background(), creds, "us-west-2", "", "other-cluster", signedAt)
	require.NoError(t, err)
	require.NotEqual(t, q.Get("X-Amz-Signature"), decode(t, other.Value).Query().Get("X-Amz-Signature"))
}

func TestTokenUsesTheRegionalEndpointOfItsPartition(t *testing.T) {
	creds := aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET"}
	tok, err := PresignToken(context.Background(), creds, "cn-north-1", "", "c", signedAt)
	require.NoError(t, err)
	require.Equal(t, "sts.cn-north-1.amazonaws.com.cn", decode(t, tok.Value).Host)
	_, err = PresignToken(context.Background(), creds, "", "", "c", signedAt)
	require.ErrorContains(t, err, "region is empty")
	_, err = PresignToken(context.Background(), creds, "us-east-1", "", "", signedAt)
	require.ErrorContains(t, err, "cluster name is empty")
}

func TestTokenSourceCachesPerClusterAndRefreshesBeforeExpiry(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(signedAt)
	src := &TokenSource{Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), Region: "eu-west-1", Clock: clk}
	ctx := context.Background()
	first, err := src.Token(ctx, "a")
	require.NoError(t, err)
	b, err := src.Token(ctx, "b")
	require.NoError(t, err)
	require.NotEqual(t, first.Value, b.Value, "one token per cluster")

	clk.SetTime(signedAt.Add(12*time.Minute + 59*time.Second))
	cached, err := src.Token(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, first.Value, cached.Value, "reused while more than a minute of its 14 is left")

	clk.SetTime(signedAt.Add(13 * time.Minute))
	fresh, err := src.Token(ctx, "a")
	require.NoError(t, err)
	require.NotEqual(t, first.Value, fresh.Value, "replaced a minute before it expires")
	require.Equal(t, "20261130T092830Z", decode(t, fresh.Value).Query().Get("X-Amz-Date"))
}
