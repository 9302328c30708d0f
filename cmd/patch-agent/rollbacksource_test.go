//go:build !nodemo

package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/operate"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/schema"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// sourceFakes answer the rollback's source check: the group's tags and the AMI its parameter names.
type sourceFakes struct {
	value  string // the parameter's value; "" = no such parameter
	ssmErr error
}

func (f sourceFakes) DescribeAutoScalingGroups(_ context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	tag := func(k, v string) astypes.TagDescription {
		return astypes.TagDescription{Key: aws.String(k), Value: aws.String(v)}
	}
	return &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: []astypes.AutoScalingGroup{{
		AutoScalingGroupName: aws.String(in.AutoScalingGroupNames[0]),
		Tags: []astypes.TagDescription{tag(model.TagEnabled, "true"), tag(model.TagPlatform, "ecs"),
			tag(model.TagCluster, "demo"), tag(model.TagParameter, testworld.Parameter)},
	}}}, nil
}

func (f sourceFakes) GetParameters(_ context.Context, in *ssm.GetParametersInput, _ ...func(*ssm.Options)) (*ssm.GetParametersOutput, error) {
	if f.ssmErr != nil {
		return nil, f.ssmErr
	}
	if f.value == "" {
		return &ssm.GetParametersOutput{InvalidParameters: in.Names}, nil
	}
	return &ssm.GetParametersOutput{Parameters: []ssmtypes.Parameter{{Name: aws.String(in.Names[0]), Value: aws.String(f.value), Version: 3}}}, nil
}

// TestRollbackWarnsWhenTheSourceAlreadyNamesANewerAMI: before the confirmation, rollback reads the group's AMI
// parameter (its tag, then GetParameters) and warns on stderr, and in the -o json document, when it names an
// AMI that is neither the one rolled back from nor the one rolled back to — the agent would roll that AMI at
// its next look. A source naming the plan's own AMI is no warning; a source that cannot be read is one line,
// and the rollback is still recorded.
func TestRollbackWarnsWhenTheSourceAlreadyNamesANewerAMI(t *testing.T) {
	const newer = "ami-0c1c2c3c4c5c6c7c8"
	tests := []struct {
		name        string
		fakes       *sourceFakes // nil: the state file's default, no AWS account
		wantWarning bool
		wantNote    string
	}{
		{"the parameter names a newer AMI", &sourceFakes{value: newer}, true, ""},
		{"the parameter still names the AMI rolled back from", &sourceFakes{value: testworld.ImageB}, false, ""},
		{"the parameter names the rollback's AMI", &sourceFakes{value: testworld.ImageA}, false, ""},
		{"the parameter cannot be read", &sourceFakes{ssmErr: errors.New("AccessDeniedException")}, false, "AccessDeniedException"},
		{"the parameter does not exist", &sourceFakes{}, false, "does not exist"},
		{"a state file has no account", nil, false, "a state file has no AWS account"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := demoState(t)
			if tc.fakes != nil {
				prev := operate.NewSourceReaders
				operate.NewSourceReaders = func(*cli.OpenedStore) (operate.SourceReaders, error) {
					return operate.SourceReaders{Groups: *tc.fakes, SSM: *tc.fakes}, nil
				}
				t.Cleanup(func() { operate.NewSourceReaders = prev })
			}
			res := run(t, "rollback", testworld.GroupName, "--yes", "--who", "alice", "-o", "json", "--state-file", file)
			require.NoError(t, res.err, res.stderr)
			require.Equal(t, state.PhaseDetected, status(t, file).Phase, "the rollback is recorded whatever the source says")
			var doc operate.RollbackDocument
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), "stdout holds only the document: %q", res.stdout)
			require.Equal(t, schema.Version, doc.SchemaVersion)
			require.Equal(t, testworld.ImageA, doc.To)
			if tc.wantWarning {
				require.Contains(t, res.stderr, "warning: "+testworld.Parameter+" already names "+newer)
				require.Contains(t, doc.SourceWarning, "superseding this rollback")
			} else {
				require.NotContains(t, res.stderr, "warning:")
				require.Empty(t, doc.SourceWarning)
			}
			if tc.wantNote != "" {
				require.Contains(t, res.stderr, tc.wantNote)
				require.Equal(t, 1, strings.Count(res.stderr, "could not read the AMI source"), "said in one line")
			} else {
				require.NotContains(t, res.stderr, "could not read the AMI source")
			}
		})
	}
}
