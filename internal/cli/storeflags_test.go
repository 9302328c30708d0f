package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// groupsAnswer is an Auto Scaling stub: no group, or err.
type groupsAnswer struct{ err error }

func (g groupsAnswer) DescribeAutoScalingGroups(context.Context, *autoscaling.DescribeAutoScalingGroupsInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	return &autoscaling.DescribeAutoScalingGroupsOutput{}, g.err
}

func TestAMisspeltGroupInTheTableIsAnsweredWithItsGroupsEvenWithoutAutoScaling(t *testing.T) {
	ctx := context.Background()
	m := state.NewMemory()
	_, err := m.PutRollout(ctx, state.Rollout{Group: "prod-ecs-asg", Phase: state.PhaseCompleted})
	require.NoError(t, err)
	notFound := fmt.Errorf("no rollout record for group prod-ecs-asx: %w", state.ErrNotFound)

	s := &OpenedStore{Store: m, Where: "table patch-agent (region eu-west-1)", Groups: groupsAnswer{}}
	err = s.ExplainNotFound(ctx, "prod-ecs-asx", notFound)
	require.ErrorIs(t, err, operator.ErrUnknownGroup)
	require.ErrorContains(t, err, "table patch-agent (region eu-west-1) holds rollout records of: prod-ecs-asg")

	s.Groups = groupsAnswer{err: errors.New("api error AccessDenied")}
	err = s.ExplainNotFound(ctx, "prod-ecs-asx", notFound)
	require.ErrorIs(t, err, state.ErrNotFound, "without Auto Scaling the store's own answer stays")
	require.ErrorContains(t, err, "no rollout record for group prod-ecs-asx: record not found; table patch-agent (region eu-west-1) holds rollout records of: prod-ecs-asg")

	other := errors.New("throttled")
	require.Equal(t, other, s.ExplainNotFound(ctx, "prod-ecs-asx", other), "another error is returned as it is")
}
