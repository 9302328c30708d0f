package crash

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// The crash harness is proven like the checker: each case breaks a run one way — a repeated effect, a broken
// invariant, a fuse that never fires — and asserts that RunCrashScenario names it. A harness that passes a
// repeat is no safety net.

// harnessScenario rolls group "g" (desired 3, max 6) of brokenWorld to ImageB, then lets hooks settle, then
// runs after (the break under test).
func harnessScenario(t *testing.T, after func(w *testworld.World) error) CrashScenario {
	return CrashScenario{
		Name:  "harness",
		Build: func() (*testworld.World, error) { return testworld.BrokenWorld(t, nil), nil },
		Drive: func(w *testworld.World) error {
			ctx := context.Background()
			w.PublishAMI("/golden/g", testworld.ImageB)
			done, err := w.RunUntil(ctx, testworld.CheckerTick, 2*time.Hour, func() bool {
				r := w.Rollout(ctx, "g")
				return r.TargetImageID == testworld.ImageB && !r.Active()
			})
			if err != nil {
				return err
			}
			if !done {
				return errors.New("the rollout did not end")
			}
			if _, err := w.RunUntil(ctx, testworld.CheckerTick, 5*time.Minute, func() bool { return false }); err != nil {
				return err
			}
			if after != nil {
				return after(w)
			}
			return nil
		},
		Final: func(w *testworld.World) error {
			if r := w.Rollout(context.Background(), "g"); r.Phase != state.PhaseCompleted {
				return errors.New("rollout not completed: " + string(r.Phase) + " " + r.Reason)
			}
			return nil
		},
	}
}

func TestCrashHarnessNamesEveryBrokenRun(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		at    int
		mode  CrashMode
		after func(w *testworld.World) error
		final func(w *testworld.World) error
		want  string // "" = the run passes
	}{
		{name: "a healthy rollout crashed after effect 3 passes", at: 3},
		{name: "a healthy rollout with effect 3's response lost passes", at: 3, mode: CrashResponseLost},
		{name: "a desired capacity write after the restart", at: 3, mode: CrashResponseLost, want: "group g: the agent set desired capacity 3 -> 4",
			after: func(w *testworld.World) error {
				_, err := w.Account.AutoScaling().(*sim.AutoScalingClient).SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
					AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(4)})
				return err
			}},
		{name: "a decrementing termination after the restart", at: 3, want: "with decrement (desired 3 -> 2)",
			after: func(w *testworld.World) error {
				_, err := w.Account.AutoScaling().(*sim.AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
					InstanceId: aws.String(w.Account.Group("g").Instances[0].ID), ShouldDecrementDesiredCapacity: aws.Bool(true)})
				return err
			}},
		{name: "a raise of maximum size after the restart", at: 3, want: "maximum size 6 -> 7",
			after: func(w *testworld.World) error {
				_, err := w.Account.AutoScaling().(*sim.AutoScalingClient).UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{
					AutoScalingGroupName: aws.String("g"), MaxSize: aws.Int32(7)})
				return err
			}},
		{name: "a second launch template version for one AMI", at: 3, want: "all on " + testworld.ImageB,
			after: func(w *testworld.World) error {
				_, err := w.Account.EC2().CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
					LaunchTemplateId:   aws.String(w.Account.Group("g").LaunchTemplateID),
					LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(testworld.ImageB)}})
				return err
			}},
		{name: "an undrained instance terminated breaks invariant 2", at: 3, want: "invariant 2",
			after: func(w *testworld.World) error {
				_, err := w.Account.AutoScaling().(*sim.AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
					InstanceId: aws.String(w.Account.Group("g").Instances[0].ID), ShouldDecrementDesiredCapacity: aws.Bool(false)})
				return err
			}},
		{name: "a fuse past the scenario's last effect never fires", at: 100000, want: "the fuse never fired"},
		{name: "a failing final assertion", at: 3, want: "not on the target",
			final: func(*testworld.World) error { return errors.New("not on the target") }},
		{name: "a driver that cannot finish", at: 3, want: "stuck",
			after: func(*testworld.World) error { return errors.New("stuck") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc := harnessScenario(t, c.after)
			if c.final != nil {
				sc.Final = c.final
			}
			run, err := RunCrashScenario(sc, c.at, c.mode)
			if c.want == "" {
				require.NoError(t, err)
				require.Equal(t, 1, run.Restarts, "one crash, one fresh incarnation")
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestCrashHarnessResponseLostGivesTheIncarnationAnErrorForADurableEffect(t *testing.T) {
	ctx := context.Background()
	for _, mode := range CrashModes {
		t.Run(mode.String(), func(t *testing.T) {
			w := testworld.BrokenWorld(t, nil)
			fuse := &testworld.Fuse{At: 2, LoseResponse: mode == CrashResponseLost}
			_, store := fuse.Wrap(w.Clients, w.Store)
			first, err := store.PutRollout(ctx, state.Rollout{Group: "a"})
			require.NoError(t, err, "effect 1 is not the chosen one")
			_, err = store.PutRollout(ctx, state.Rollout{Group: "b"})
			if mode == CrashResponseLost {
				require.ErrorIs(t, err, testworld.ErrResponseLost, "the incarnation sees effect 2 fail")
			} else {
				require.NoError(t, err, "the incarnation sees effect 2 succeed")
			}
			stored, err := w.Store.GetRollout(ctx, "b")
			require.NoError(t, err, "effect 2 is durable either way")
			require.Equal(t, int64(1), stored.Version)
			require.True(t, fuse.Blown())
			_, err = store.PutRollout(ctx, state.Rollout{Group: "a", Version: first.Version})
			require.ErrorIs(t, err, testworld.ErrCrashed, "then the incarnation is dead")
			require.Equal(t, 2, fuse.Effects())

			w.ReplaceAgent(fuse)
			require.NoError(t, w.Step(ctx, testworld.CheckerTick), "Step replaces a dead incarnation by a fresh one")
			require.Equal(t, 1, w.Restarts)
		})
	}
}
