package agent_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Field case C20 (../shared/CASES.md): the AMI gate. Every refusal is asserted the same way: no launch template
// version created, the group's launch template reference unchanged, no instance replaced (none launched, none
// terminated, all still on the old AMI), the rollout Waiting with the refusal as its status reason, and one
// AMIRejected count with the refusal's Reason.

const (
	imageC      = "ami-0c1c2c3c4c5c6c7c8"
	foreignAcct = "999988887777"
)

// gateWorld is a world whose agent reports to a metrics registry.
type gateWorld struct {
	*testworld.World
	reg *metrics.Registry
	g   testworld.GroupSetup
}

func buildGate(t *testing.T, g testworld.GroupSetup, edit func(*testworld.Spec)) gateWorld {
	t.Helper()
	spec := oneGroup(&g)
	reg := metrics.NewRegistry(nil)
	spec.Observer = reg
	if edit != nil {
		edit(&spec)
	}
	w := build(t, spec)
	reg.Clock = w.Account.Clock()
	ctx := context.Background()
	_, err := w.RunUntil(ctx, tick, 2*time.Minute, func() bool { return false }) // the fleet settles on ImageA
	require.NoError(t, err)
	return gateWorld{World: w, reg: reg, g: g}
}

// golden returns the spec of an AMI the account built: available, AL2023, of arch.
func golden(id, arch string) sim.ImageSpec {
	return sim.ImageSpec{ID: id, Name: "golden-al2023-ami-ecs-hvm-2023.0.20261201-kernel-6.1-" + arch, Architecture: arch,
		Description: "Golden AMI built on al2023-ami-ecs-hvm-2023.0.20261201", OwnerID: "111122223333"}
}

// rejected returns the AMIRejected counter of the group and reason (0 when never counted).
func (w gateWorld) rejected(reason string) float64 {
	for _, s := range w.reg.Collect() {
		if s.Name == metrics.AMIRejected && s.Group == w.g.Name && s.Reason == reason {
			return s.Value
		}
	}
	return 0
}

// requireRefused runs the world for 30 minutes after image was published and asserts the refusal.
func requireRefused(t *testing.T, w gateWorld, image, reason, wantInReason string) {
	t.Helper()
	ctx := context.Background()
	before := w.Account.Group(w.g.Name)
	launched := w.Account.LaunchedInstances(w.g.Name)
	w.Account.ResetCalls()
	_, err := w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	require.Empty(t, w.Checker.Finish())

	r := w.Rollout(ctx, w.g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase, "a refusal waits; it never ends in a phase that ignores newer AMIs")
	require.Equal(t, image, r.TargetImageID)
	require.Contains(t, r.Reason, "AMI refused: "+image)
	require.Contains(t, r.Reason, "("+reason+")")
	require.Contains(t, r.Reason, wantInReason)

	calls := w.Account.Calls()
	require.Zero(t, calls["ec2:CreateLaunchTemplateVersion"], "no launch template version created")
	require.Zero(t, calls["autoscaling:UpdateAutoScalingGroup"], "the group is not pointed at anything")
	require.Zero(t, calls["autoscaling:SetDesiredCapacity"], "no capacity write")
	require.Zero(t, calls["autoscaling:TerminateInstanceInAutoScalingGroup"], "nothing terminated")
	after := w.Account.Group(w.g.Name)
	require.Equal(t, before.LaunchTemplateID, after.LaunchTemplateID, "launch template reference unchanged")
	require.Equal(t, before.LaunchTemplateVersion, after.LaunchTemplateVersion, "launch template reference unchanged")
	require.Equal(t, launched, w.Account.LaunchedInstances(w.g.Name), "no instance launched")
	require.Empty(t, r.Replaced)
	requireAllOn(t, w.World, w.g.Name, testworld.ImageA, int(w.g.Desired))

	require.Equal(t, 1.0, w.rejected(reason), "one AMIRejected count for the refusal, not one per tick")
	// 360 ticks in 30 minutes; answers are reused for 5 minutes: at most the target and the current AMI
	// once per 5 minutes.
	require.LessOrEqual(t, calls["ec2:DescribeImages"], 2*(30/5+1), "a waiting refusal does not call EC2 every tick")
	require.LessOrEqual(t, calls["ec2:DescribeLaunchTemplateVersions"], 30/5+1)
}

func TestC20PendingAMIIsRefusedUntilItIsAvailable(t *testing.T) {
	w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, nil)
	spec := golden(imageC, "arm64")
	spec.State = ec2types.ImageStatePending
	w.Account.RegisterImage(spec)
	w.PublishAMI(w.g.Parameter, imageC)
	requireRefused(t, w, imageC, providers.RejectImageNotAvailable, "is pending, not available")

	// EC2 finishes the image: the same AMI passes at the next look and rolls.
	w.Account.SetImageState(imageC, ec2types.ImageStateAvailable)
	ctx := context.Background()
	done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, w.g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "%+v", w.Rollout(ctx, w.g.Name))
	requireAllOn(t, w.World, w.g.Name, imageC, 2)
}

func TestC20DeregisteredAMIIsRefused(t *testing.T) {
	w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, nil)
	spec := golden(imageC, "arm64")
	spec.State = ec2types.ImageStateDeregistered
	w.Account.RegisterImage(spec)
	w.PublishAMI(w.g.Parameter, imageC)
	requireRefused(t, w, imageC, providers.RejectImageNotAvailable, "is deregistered, not available")
}

func TestC20AMIUnknownToEC2IsRefused(t *testing.T) {
	w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, nil)
	w.Account.PutParameter(w.g.Parameter, imageC) // registered nowhere; the agent's poll finds it
	requireRefused(t, w, imageC, providers.RejectImageNotFound, "does not exist in EC2")
}

func TestC20ForeignOwnerIsRefusedUnlessAllowedByTheFlagOrTheTag(t *testing.T) {
	foreign := golden(imageC, "arm64")
	foreign.OwnerID = foreignAcct
	t.Run("refused", func(t *testing.T) {
		w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, nil)
		w.Account.RegisterImage(foreign)
		w.PublishAMI(w.g.Parameter, imageC)
		requireRefused(t, w, imageC, providers.RejectOwnerNotAllowed, "is owned by "+foreignAcct+", not by an allowed owner [111122223333]")
	})
	t.Run("Amazon is not an owner of a golden-AMI parameter by default", func(t *testing.T) {
		w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, nil)
		amazon := golden(imageC, "arm64")
		amazon.OwnerID = "" // Amazon's
		w.Account.RegisterImage(amazon)
		w.PublishAMI(w.g.Parameter, imageC)
		requireRefused(t, w, imageC, providers.RejectOwnerNotAllowed, "is owned by 591542846629 (amazon)")
	})
	for _, c := range []struct {
		name string
		edit func(*testworld.Spec)
	}{
		{"allowed by --allowed-ami-owners", func(s *testworld.Spec) { s.AllowedAMIOwners = []string{foreignAcct} }},
		{"allowed by the group's tag", func(s *testworld.Spec) {
			s.Groups[0].Tags = map[string]string{model.TagAllowedAMIOwners: "444455556666, " + foreignAcct}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, c.edit)
			w.Account.RegisterImage(foreign)
			r := rollTo(t, w.World, w.g, imageC)
			require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
			requireAllOn(t, w.World, w.g.Name, imageC, 2)
			require.Zero(t, w.rejected(providers.RejectOwnerNotAllowed))
		})
	}
}

func TestC20WrongArchitectureIsRefused(t *testing.T) {
	t.Run("arm64 AMI for an x86_64 group", func(t *testing.T) {
		w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2, InstanceType: "m5.large"}, nil)
		w.Account.RegisterImage(golden(imageC, "arm64"))
		w.PublishAMI(w.g.Parameter, imageC)
		requireRefused(t, w, imageC, providers.RejectArchitectureMismatch, "is arm64 but the group can launch m5.large (x86_64)")
	})
	t.Run("mixed instances overrides include a Graviton type", func(t *testing.T) {
		w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2, InstanceType: "m5.large",
			MixedInstances: true, Overrides: []string{"m5.large", "m6i.large", "m6g.large"}}, nil)
		w.Account.RegisterImage(golden(imageC, "x86_64"))
		w.PublishAMI(w.g.Parameter, imageC)
		requireRefused(t, w, imageC, providers.RejectArchitectureMismatch, "is x86_64 but the group can launch m6g.large (arm64)")
	})
}

func TestC20OSFamilyChangeIsRefused(t *testing.T) {
	t.Run("AL2 EKS group pointed at a Bottlerocket parameter", func(t *testing.T) {
		param := "/aws/service/bottlerocket/aws-k8s-" + testworld.EKSVersion + "/arm64/latest/image_id"
		w := buildGate(t, testworld.GroupSetup{Name: "eks-nodes", Platform: model.PlatformEKS, Cluster: "c1", Parameter: param,
			Min: 2, Max: 4, Desired: 2, Tags: map[string]string{providers.TagAMIFamily: "al2"}}, func(s *testworld.Spec) { s.Services = nil })
		// The group runs the EKS-optimized AL2 AMI.
		w.Account.RegisterImage(sim.ImageSpec{ID: testworld.ImageA, Name: "amazon-eks-arm64-node-" + testworld.EKSVersion + "-v20261101",
			Description: "EKS Kubernetes Worker AMI with AmazonLinux2 image", Architecture: "arm64"})
		w.Account.RegisterImage(sim.ImageSpec{ID: imageC, Name: "bottlerocket-aws-k8s-" + testworld.EKSVersion + "-aarch64-v1.27.0-2a1b3c4d",
			Description: "bottlerocket-aws-k8s-" + testworld.EKSVersion + "-aarch64", Architecture: "arm64"})
		w.PublishPublicAMI(param, imageC)
		requireRefused(t, w, imageC, providers.RejectOSFamilyChange, "is bottlerocket but the group runs al2 ("+testworld.ImageA+")")
	})
	t.Run("Linux to Windows", func(t *testing.T) {
		w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2, InstanceType: "m5.large"}, nil)
		w.Account.RegisterImage(sim.ImageSpec{ID: imageC, Name: "Windows_Server-2022-English-Full-ECS_Optimized-2026.11.12",
			Platform: ec2types.PlatformValuesWindows, OwnerID: "111122223333"})
		w.PublishAMI(w.g.Parameter, imageC)
		requireRefused(t, w, imageC, providers.RejectOSFamilyChange, "is windows but the group runs al2023 ("+testworld.ImageA+")")
	})
	t.Run("AL2 golden AMI whose name also says Bottlerocket, pointed at Bottlerocket", func(t *testing.T) {
		// The current AMI's name names two families: it tells neither, so it is not taken for Bottlerocket.
		w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, nil)
		w.Account.RegisterImage(sim.ImageSpec{ID: testworld.ImageA, Name: "acme-al2-ecs-bottlerocket-compat-2026.11", Architecture: "arm64", OwnerID: "111122223333"})
		w.Account.RegisterImage(sim.ImageSpec{ID: imageC, Name: "bottlerocket-aws-ecs-2-aarch64-v1.27.0-2a1b3c4d", Architecture: "arm64", OwnerID: "111122223333"})
		w.PublishAMI(w.g.Parameter, imageC)
		requireRefused(t, w, imageC, providers.RejectOSFamilyChange, "is bottlerocket but the group runs unclear (name says bottlerocket, al2) ("+testworld.ImageA+")")
	})
}

func TestC20FamilyChangeRollsWithTheOptInTag(t *testing.T) {
	w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2,
		Tags: map[string]string{model.TagAllowAMIFamilyChange: "true"}}, nil)
	w.Account.RegisterImage(sim.ImageSpec{ID: testworld.ImageA, Name: "golden-amzn2-ami-ecs-hvm-2.0.20261101-arm64-ebs",
		Architecture: "arm64", OwnerID: "111122223333"})
	w.Account.RegisterImage(golden(imageC, "arm64")) // AL2 -> AL2023
	r := rollTo(t, w.World, w.g, imageC)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	requireAllOn(t, w.World, w.g.Name, imageC, 2)
	require.Zero(t, w.rejected(providers.RejectOSFamilyChange))
}

func TestC20AfterARefusedAMITheParameterMovingToAGoodAMIRollsNormally(t *testing.T) {
	w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2, InstanceType: "m5.large"}, nil)
	w.Account.RegisterImage(golden(imageC, "arm64"))
	w.PublishAMI(w.g.Parameter, imageC)
	requireRefused(t, w, imageC, providers.RejectArchitectureMismatch, "is arm64")

	w.Account.RegisterImage(golden(testworld.ImageB, "x86_64"))
	r := rollTo(t, w.World, w.g, testworld.ImageB)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Equal(t, testworld.ImageA, r.PreviousImageID, "the group ran ImageA, never the refused AMI")
	require.Equal(t, 2, r.OnTarget)
	require.Equal(t, 1, refreshCalls(w.World, "autoscaling:StartInstanceRefresh"), "one refresh, the good AMI's")
	requireAllOn(t, w.World, w.g.Name, testworld.ImageB, 2)
	require.Equal(t, 1.0, w.rejected(providers.RejectArchitectureMismatch))
	var events []string
	history, err := w.Store.History(context.Background(), w.g.Name)
	require.NoError(t, err)
	for _, h := range history {
		events = append(events, h.Event+" "+h.NewImage)
	}
	require.Subset(t, events, []string{"detected " + imageC, "ami-refused " + imageC, "detected " + testworld.ImageB, "completed " + testworld.ImageB})
}

// failingImages answers DescribeImages with AccessDenied while on is set.
type failingImages struct {
	awsapi.EC2
	on *atomic.Bool
}

func (f failingImages) DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, o ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error) {
	if f.on.Load() {
		return nil, &smithy.GenericAPIError{Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation."}
	}
	return f.EC2.DescribeImages(ctx, in, o...)
}

func TestC20AnAWSErrorWhileGatingHoldsAndNeverPasses(t *testing.T) {
	var on atomic.Bool
	on.Store(true)
	w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, func(s *testworld.Spec) {
		s.Wrap = func(c agent.Clients) agent.Clients { c.EC2 = failingImages{c.EC2, &on}; return c }
	})
	ctx := context.Background()
	w.PublishAMI(w.g.Parameter, testworld.ImageB)
	w.Account.ResetCalls()
	_, err := w.RunUntil(ctx, tick, 20*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, w.g.Name)
	require.Equal(t, state.PhaseDetected, r.Phase)
	require.Contains(t, r.Reason, "retrying after an error")
	require.Contains(t, r.Reason, "UnauthorizedOperation")
	require.Zero(t, w.Account.Calls()["ec2:CreateLaunchTemplateVersion"])
	requireAllOn(t, w.World, w.g.Name, testworld.ImageA, 2)
	for _, s := range w.reg.Collect() {
		require.NotEqual(t, metrics.AMIRejected, s.Name, "an error is not a refusal")
	}

	on.Store(false) // the permission is fixed: the AMI passes and rolls
	done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, w.g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
	requireAllOn(t, w.World, w.g.Name, testworld.ImageB, 2)
}

// C20 with the AMI gate's shared answers (1,000 groups gating one AMI read its DescribeImages once): the check
// just before Preparing reuses only an answer of the last few seconds (AMIGate.FreshTTL), never one of the 5
// minutes a waiting rollout reuses. An AMI that passed at detection and was deregistered during a 3-minute soak
// is refused when the soak ends: no launch template version, nothing replaced.
func TestC20AMIDeregisteredDuringTheSoakIsRefusedAtTheFreshCheckBeforePreparing(t *testing.T) {
	w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2, Tags: map[string]string{model.TagMinAMIAge: "3m"}}, nil)
	ctx := context.Background()
	w.Account.RegisterImage(golden(imageC, "arm64"))
	w.PublishAMI(w.g.Parameter, imageC)
	_, err := w.RunUntil(ctx, tick, time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, w.g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase, "soaking: %s", r.Reason)
	require.NotContains(t, r.Reason, "AMI refused", "the AMI passed the gate at detection")

	w.Account.SetImageState(imageC, ec2types.ImageStateDeregistered) // within the gate's 5-minute reuse
	requireRefused(t, w, imageC, providers.RejectImageNotAvailable, "is deregistered, not available")
}
