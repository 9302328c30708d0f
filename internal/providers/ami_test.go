package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// loadSSMFixture reads an `aws ssm get-parameter` response from testdata/ssm. LastModifiedDate comes either
// as an RFC 3339 string or as epoch seconds, as the CLI prints it.
func loadSSMFixture(t *testing.T, name string) ssmtypes.Parameter {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "ssm", name))
	require.NoError(t, err)
	var doc struct {
		Parameter struct {
			Name, Type, Value, ARN, DataType string
			Version                          int64
			LastModifiedDate                 json.RawMessage
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	p := doc.Parameter
	var modified time.Time
	var s string
	if json.Unmarshal(p.LastModifiedDate, &s) == nil {
		modified, err = time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
	} else {
		f, err := strconv.ParseFloat(string(p.LastModifiedDate), 64)
		require.NoError(t, err)
		modified = time.Unix(0, int64(f*1e9)).UTC()
	}
	return ssmtypes.Parameter{Name: aws.String(p.Name), Type: ssmtypes.ParameterType(p.Type), Value: aws.String(p.Value),
		Version: p.Version, ARN: aws.String(p.ARN), DataType: aws.String(p.DataType), LastModifiedDate: aws.Time(modified)}
}

func TestParseParameterValueFixtures(t *testing.T) {
	cases := []struct {
		fixture, image string
	}{
		{"bottlerocket-k8s-image-id.json", "ami-07d2b6f0e9a1c3b58"},
		{"ecs-al2-recommended-2018.json", "ami-0a6be20ed8ce1f055"},
		{"ecs-al2023-recommended.json", "ami-0281c9a5cd9de63bd"},
		{"eks-al2-recommended.json", "ami-0b89776dcfa5f2dee"},
		{"eks-al2023-image-id.json", "ami-0e3c5a2f1d8b7a6c4"},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			p := loadSSMFixture(t, c.fixture)
			id, _, err := ParseParameterValue(aws.ToString(p.Value))
			require.NoError(t, err)
			require.Equal(t, c.image, id)
		})
	}
}

func TestParseParameterValueRejectsNonAMIs(t *testing.T) {
	for name, value := range map[string]string{
		"empty":             "",
		"json without id":   `{"image_name":"x"}`,
		"broken json":       `{"image_id":`,
		"not an ami":        "i-0123456789abcdef0",
		"uppercase hex":     "ami-0A1B2C3D",
		"undefined":         "undefined",
		"ami id with space": "ami-0123 4567",
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := ParseParameterValue(value)
			require.Error(t, err)
		})
	}
}

// fakeSSM serves parameters and enforces the GetParameters limit of 10 names per call.
type fakeSSM struct {
	params map[string]ssmtypes.Parameter
	calls  [][]string
}

var _ awsapi.SSM = (*fakeSSM)(nil)

func (f *fakeSSM) GetParameters(_ context.Context, in *ssm.GetParametersInput, _ ...func(*ssm.Options)) (*ssm.GetParametersOutput, error) {
	if len(in.Names) > 10 {
		return nil, fmt.Errorf("ValidationException: %d names, at most 10", len(in.Names))
	}
	f.calls = append(f.calls, in.Names)
	out := &ssm.GetParametersOutput{}
	for _, n := range in.Names {
		if p, ok := f.params[n]; ok {
			out.Parameters = append(out.Parameters, p)
		} else {
			out.InvalidParameters = append(out.InvalidParameters, n)
		}
	}
	return out, nil
}

func TestResolverBatchesTenNamesPerCallAndReportsMissingAndInvalid(t *testing.T) {
	f := &fakeSSM{params: map[string]ssmtypes.Parameter{}}
	var names []string
	for i := range 23 {
		n := fmt.Sprintf("/golden/%02d", i)
		names = append(names, n, n) // duplicates are asked once
		f.params[n] = ssmtypes.Parameter{Name: aws.String(n), Value: aws.String(fmt.Sprintf("ami-%08x", i)), Version: 1}
	}
	f.params["/golden/bad"] = ssmtypes.Parameter{Name: aws.String("/golden/bad"), Value: aws.String("latest"), Version: 3}
	names = append(names, "/golden/bad", "/golden/missing")

	found, missing, invalid, err := Resolver{SSM: f}.Resolve(context.Background(), names)
	require.NoError(t, err)
	require.Len(t, found, 23)
	require.Equal(t, []string{"/golden/missing"}, missing)
	require.Contains(t, invalid, "/golden/bad")
	require.Len(t, f.calls, 3, "25 distinct names take 3 calls")
	for _, c := range f.calls {
		require.LessOrEqual(t, len(c), 10)
	}
}

func TestResolverReadsRecommendedDocumentFixture(t *testing.T) {
	p := loadSSMFixture(t, "ecs-al2023-recommended.json")
	f := &fakeSSM{params: map[string]ssmtypes.Parameter{aws.ToString(p.Name): p}}
	found, _, _, err := Resolver{SSM: f}.Resolve(context.Background(), []string{aws.ToString(p.Name)})
	require.NoError(t, err)
	got := found[aws.ToString(p.Name)]
	require.Equal(t, "ami-0281c9a5cd9de63bd", got.ImageID)
	require.Equal(t, int64(61), got.Version)
	require.True(t, got.LastModified.Equal(time.Date(2024, 11, 18, 16, 8, 46, 926000000, time.UTC)))
}
