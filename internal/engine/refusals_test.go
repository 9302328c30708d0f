package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// roomPlatform is an ECS platform that also counts each instance's standalone tasks (providers.ClusterRoom).
type roomPlatform struct {
	fakePlatform
	standalone map[string]int
}

var _ providers.ClusterRoom = (*roomPlatform)(nil)

func (p *roomPlatform) Room(_ context.Context, _, id string) (ecsdrain.Room, error) {
	return ecsdrain.Room{Standalone: p.standalone[id]}, nil
}

// detectedRig is a refresh rig whose record was detected for amiNew two days after the AMI appeared: with
// every gate open, the next Reconcile starts the refresh.
func detectedRig() (*rig, *fakeRefreshes) {
	rg, f := refreshRig()
	rg.seed0(state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour)})
	return rg, f
}

// A group tagged patch-agent/standalone-tasks=refuse whose instances run standalone tasks (which ECS does not
// move off a DRAINING instance) is refused before anything changes: halted without a rollback, naming the
// instance; without such tasks the same group rolls.
func TestStandaloneTasksRefuseHaltsTheGroupBeforeItsRefresh(t *testing.T) {
	for _, standalone := range []int{2, 0} {
		rg, f := detectedRig()
		rg.target.Policy.StandaloneTasks = model.StandaloneRefuse
		rg.o.Platforms = model.Platforms{model.PlatformECS: &roomPlatform{standalone: map[string]int{"i-2": standalone}}}
		stored := reconcileFor(t, rg, time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newAMI()} })
		if standalone == 0 {
			require.Len(t, f.starts, 1, "no standalone task: the group rolls")
			continue
		}
		require.Equal(t, state.PhaseHalted, stored.Phase)
		require.Contains(t, stored.Reason, "i-2 (2)")
		require.Empty(t, f.starts)
		require.Empty(t, f.rollbacks)
	}
}

// The Auto Scaling group of an AWS Batch compute environment (its AWSBatchServiceTag, or its name) is refused
// whatever its tags: Batch manages the group, its launch template and its cluster.
func TestAWSBatchComputeEnvironmentGroupIsRefused(t *testing.T) {
	for _, batch := range []bool{true, false} {
		rg, f := detectedRig()
		v := oldFleet()
		if batch {
			v.Group.Tags = []astypes.TagDescription{{Key: aws.String(TagAWSBatchService), Value: aws.String("batch")}}
		}
		stored := reconcileFor(t, rg, time.Minute, func() model.Inputs { return model.Inputs{View: v, AMI: newAMI()} })
		if !batch {
			require.Len(t, f.starts, 1)
			continue
		}
		require.Equal(t, state.PhaseHalted, stored.Phase)
		require.Contains(t, stored.Reason, "AWS Batch")
		require.Empty(t, f.starts)
	}
}

// A group whose scale-in protection ECS manages (managed termination protection: AmazonECSManaged and new
// instances protected) is refreshed with ScaleInProtectedInstances Refresh: every instance running tasks is
// protected, and a refresh that waited for them would fail after an hour. Other groups wait for protected
// instances (the protection is the user's).
func TestRefreshReplacesProtectedInstancesOnlyWhereECSManagesTheProtection(t *testing.T) {
	for _, managed := range []bool{true, false} {
		rg, f := detectedRig()
		v := oldFleet()
		v.Group.NewInstancesProtectedFromScaleIn = aws.Bool(true)
		if managed {
			v.Group.Tags = []astypes.TagDescription{{Key: aws.String(model.TagECSManaged), Value: aws.String("")}}
		}
		reconcileFor(t, rg, time.Minute, func() model.Inputs { return model.Inputs{View: v, AMI: newAMI()} })
		require.Len(t, f.starts, 1)
		want := astypes.ScaleInProtectedInstancesWait
		if managed {
			want = astypes.ScaleInProtectedInstancesRefresh
		}
		require.Equal(t, want, f.starts[0].Preferences.ScaleInProtectedInstances)
	}
}

// A soak an operator skipped belongs to the AMI they skipped it for: the rollout of that AMI starts before the
// soak ends, a newer AMI's waits out its own soak.
func TestSkippedSoakBelongsToOneAMI(t *testing.T) {
	for _, skipped := range []string{amiNew, amiOld} {
		rg, f := refreshRig()
		rg.target.Policy.MinAMIAge = 24 * time.Hour
		rg.seed0(state.Rollout{Phase: state.PhaseWaiting, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-time.Hour),
			SkipSoakImage: skipped, Reason: "soak: ..."})
		fresh := &model.ResolvedAMI{Parameter: "/golden/ecs", ImageID: amiNew, Version: 2, LastModified: now0.Add(-time.Hour)}
		stored := reconcileFor(t, rg, time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: fresh} })
		if skipped == amiNew {
			require.Len(t, f.starts, 1, "the soak of this AMI was skipped")
			continue
		}
		require.Empty(t, f.starts, "a skip given for another AMI does not skip this one's soak")
		require.Equal(t, state.PhaseWaiting, stored.Phase)
		require.Contains(t, stored.Reason, "soak")
	}
}

// A group whose launch template an outside change (a terraform apply) set back to the previous AMI more than
// maxSetBackRolls times is held, not rolled again, until its template changes or an operator approves: the
// agent and the apply do not fight on every apply. Set back once, it is rolled again.
func TestGroupSetBackMoreThanOnceIsHeldNotRolledAgain(t *testing.T) {
	for _, setBacks := range []int{maxSetBackRolls + 1, maxSetBackRolls} {
		rg, f := refreshRig()
		rg.seed0(state.Rollout{Phase: state.PhaseDetected, Trigger: TriggerSetBack, SetBacks: setBacks, SetBackBy: "launch template version 7",
			TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour)})
		stored := reconcileFor(t, rg, time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newAMI()} })
		if setBacks <= maxSetBackRolls {
			require.Len(t, f.starts, 1, "set back once: rolled again")
			continue
		}
		require.Empty(t, f.starts, "held: not rolled again")
		require.Equal(t, state.PhaseWaiting, stored.Phase)
		require.Contains(t, stored.Reason, setBackReasonPrefix)
	}
}
