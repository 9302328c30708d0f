package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Small in-package fakes of the rollout engine's providers: each records what it was asked and answers from
// its fields, so an orchestrator unit test states the world in a few lines and asserts the calls made.

const (
	amiOld = "ami-0000000000000000a"
	amiNew = "ami-0000000000000000b"
	amiBad = "ami-0000000000000000c"
)

// now0 is the fake clock's start.
var now0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type groupCall struct {
	Op     string // Traits
	Target string // group or instance id
	N      int32
}

type fakeGroups struct {
	traits model.GroupTraits
	err    error
	calls  []groupCall
	// api answers the traits' lifecycle hooks as providers.AutoScalingGroups does (one DescribeLifecycleHooks);
	// nil or answering nil: traits.Hooks as set.
	api func() providers.HookDescriber
}

var _ providers.Groups = (*fakeGroups)(nil)

func (f *fakeGroups) Traits(ctx context.Context, group string, _ map[string]string) (model.GroupTraits, error) {
	f.calls = append(f.calls, groupCall{Op: "Traits", Target: group})
	tr := f.traits
	if f.err != nil || f.api == nil || f.api() == nil {
		return tr, f.err
	}
	hooks, err := providers.DescribeGroupHooks(ctx, f.api(), group)
	tr.Hooks = hooks
	return tr, err
}

type fakeTemplates struct {
	current providers.TemplateVersion // what Resolve answers
	created int64                     // the version EnsureVersion answers
	pointed []state.LaunchTemplateRef
}

var _ providers.TemplateProvider = (*fakeTemplates)(nil)

func (f *fakeTemplates) Resolve(context.Context, state.LaunchTemplateRef) (providers.TemplateVersion, error) {
	return f.current, nil
}
func (f *fakeTemplates) EnsureVersion(_ context.Context, _ state.LaunchTemplateRef, imageID, _ string) (providers.TemplateVersion, error) {
	return providers.TemplateVersion{Number: f.created, ImageID: imageID}, nil
}

type fakePlatform struct {
	drained    bool
	started    []string
	undrained  []string
	drainError error
}

var _ model.Platform = (*fakePlatform)(nil)

func (f *fakePlatform) Observe(context.Context, string) (map[string]model.NodeState, error) {
	return nil, nil
}
func (f *fakePlatform) StartDrain(_ context.Context, _, id string) error {
	f.started = append(f.started, id)
	return f.drainError
}
func (f *fakePlatform) DrainStatus(context.Context, string, string) (model.DrainProgress, error) {
	return model.DrainProgress{Drained: f.drained, Detail: fmt.Sprintf("drained=%v", f.drained)}, nil
}
func (f *fakePlatform) Undrain(_ context.Context, _, id string) error {
	f.undrained = append(f.undrained, id)
	return nil
}

// rig is an Orchestrator over the fakes, a memory store and a fake clock.
type rig struct {
	o         *Orchestrator
	store     *state.Memory
	clock     *clocktesting.FakeClock
	groups    *fakeGroups
	templates *fakeTemplates
	platform  *fakePlatform
	target    model.Target
}

func newRig() *rig {
	r := &rig{store: state.NewMemory(), clock: clocktesting.NewFakeClock(now0), groups: &fakeGroups{},
		templates: &fakeTemplates{current: providers.TemplateVersion{Number: 1, ImageID: amiOld}, created: 2}, platform: &fakePlatform{},
		target: model.Target{Group: "prod", Platform: model.PlatformECS, Cluster: "c1", Parameter: "/golden/ecs"}}
	// The group has the agent's launching and terminating hooks and no instance refresh: a rollout starts by
	// instance refresh (rollout_refresh.go); any other Auto Scaling call panics.
	f := &fakeRefreshes{now: r.clock.Now, hooks: []astypes.LifecycleHook{
		{LifecycleHookName: aws.String("patch-agent-launch"), LifecycleTransition: aws.String(model.TransitionLaunching)},
		{LifecycleHookName: aws.String("patch-agent-drain"), LifecycleTransition: aws.String(model.TransitionTerminating)}}}
	r.o = &Orchestrator{Owner: "me", Store: r.store, AutoScaling: f, Groups: r.groups, Templates: r.templates,
		Platforms: model.Platforms{model.PlatformECS: r.platform}, Clock: r.clock, Log: zap.NewNop(), Policy: model.DefaultPolicy()}
	r.groups.api = func() providers.HookDescriber {
		if r.o.AutoScaling == nil {
			return nil
		}
		return r.o.AutoScaling
	}
	return r
}

// newAMI is the source's answer: amiNew, modified two days ago.
func newAMI() *model.ResolvedAMI {
	return &model.ResolvedAMI{Parameter: "/golden/ecs", ImageID: amiNew, Version: 2, LastModified: now0.Add(-48 * time.Hour)}
}

// serving is an instance in service and healthy in its cluster.
func serving(id, ami string) model.InstanceView {
	return model.InstanceView{ID: id, AvailabilityZone: "eu-west-1a", LifecycleState: string(astypes.LifecycleStateInService), ImageID: ami,
		Node: model.NodeState{Registered: true, Healthy: true, Name: "arn:ci/" + id}}
}

// draining is a serving instance set DRAINING.
func draining(id, ami string) model.InstanceView {
	i := serving(id, ami)
	i.Node.Draining = true
	return i
}

// view is group prod (launch template lt-1 version 1 unless noTemplate) with desired capacity desired, max 4.
func view(desired int32, noTemplate bool, instances ...model.InstanceView) model.GroupView {
	g := astypes.AutoScalingGroup{AutoScalingGroupName: aws.String("prod")}
	if !noTemplate {
		g.LaunchTemplate = &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String("lt-1"), Version: aws.String("1")}
	}
	return model.GroupView{Group: g, Name: "prod", Min: 1, Max: 4, Desired: desired, Instances: instances, ObservedAt: now0}
}
