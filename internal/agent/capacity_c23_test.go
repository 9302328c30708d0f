package agent_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/engine"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
)

// c23Provider is the capacity provider of field case C23: managed scaling at a target of 100 %, managed
// termination protection, no managed draining.
func c23Provider(name string) *sim.CapacityProviderSpec {
	return &sim.CapacityProviderSpec{Name: name, ManagedScaling: true, ManagedTerminationProtection: true}
}

// groupShape is a group's in-service instances per Availability Zone.
type groupShape struct {
	InService int
	PerAZ     map[string]int
}

func shapeOf(w *testworld.World, group string) groupShape {
	s := groupShape{PerAZ: map[string]int{}}
	for _, i := range w.Account.Group(group).Instances {
		if i.LifecycleState == "InService" {
			s.InService++
			s.PerAZ[i.AvailabilityZone]++
		}
	}
	return s
}

// requireC23End asserts C23's end state for a group: the same number of instances in the same zones at the
// rollout's completion as at its start; then, once settled, all on the new AMI, none DRAINING, max size as it was.
func requireC23End(t *testing.T, w *testworld.World, group string, before, completed groupShape, maxBefore int32) {
	t.Helper()
	require.Equal(t, before, completed, "%s keeps its size and AZ spread\n%s", group, trace(w, group))
	g := w.Account.Group(group)
	require.Equal(t, maxBefore, g.Max, "max size given back")
	for _, i := range g.Instances {
		if i.LifecycleState != "InService" {
			continue
		}
		require.Equal(t, testworld.ImageB, i.ImageID, i.ID)
		require.Equal(t, "ACTIVE", i.ContainerInstanceStatus, "%s left DRAINING", i.ID)
	}
}

// trace renders a group's desired capacity changes and terminations, for failure messages.
func trace(w *testworld.World, group string) string {
	var b strings.Builder
	for _, c := range w.Account.DesiredChanges(group) {
		fmt.Fprintf(&b, "%s desired %d -> %d by %s\n", c.At.Format(time.TimeOnly), c.From, c.To, c.By)
	}
	for _, term := range w.Account.Terminations() {
		if term.Group == group {
			i, _ := w.Account.Instance(term.InstanceID)
			fmt.Fprintf(&b, "%s terminate %s (%s) cause %s\n", term.RequestedAt.Format(time.TimeOnly), term.InstanceID, i.AvailabilityZone, term.Cause)
		}
	}
	return b.String()
}

// runC23 publishes ImageB and runs until every group's rollout completed, then lets managed scaling settle for
// 20 minutes (more than its 15-minute scale-in window) and asserts every invariant. It returns each group's
// shape when its rollout completed: what ECS managed scaling does afterwards is ECS's decision (the checker
// holds the end state to the start unless the simulation recorded an ECS scale-in for each missing instance).
func runC23(t *testing.T, w *testworld.World, parameter string, groups ...string) map[string]groupShape {
	t.Helper()
	ctx := context.Background()
	w.PublishAMI(parameter, testworld.ImageB)
	at := map[string]groupShape{}
	done, err := w.RunUntil(ctx, tick, 6*time.Hour, func() bool {
		for _, g := range groups {
			if _, seen := at[g]; !seen && w.Rollout(ctx, g).Phase == state.PhaseCompleted {
				at[g] = shapeOf(w, g)
			}
		}
		return len(at) == len(groups)
	})
	require.NoError(t, err)
	for _, g := range groups {
		require.True(t, done, "rollout of %s: %+v\n%s", g, w.Rollout(ctx, g), trace(w, g))
		require.Equal(t, model.StrategyRefresh, w.Rollout(ctx, g).Strategy)
	}
	settle(t, w, 20*time.Minute)
	var traces []string
	for _, g := range groups {
		traces = append(traces, trace(w, g))
	}
	require.Empty(t, w.Checker.Finish(), strings.Join(traces, "\n"))
	return at
}

// runningRange records the fewest and most RUNNING tasks of a service on every change of the account.
func runningRange(w *testworld.World, cluster, service string) *[2]int {
	r := &[2]int{1 << 30, 0}
	w.Account.OnChange(func(v *sim.View) {
		n := v.ServiceTasks(cluster, service)
		r[0], r[1] = min(r[0], n), max(r[1], n)
	})
	return r
}

// Field case C23 with the services' deployment configuration deciding the drain: with minimumHealthyPercent 50
// / maximumPercent 100 ECS stops a draining instance's task before its replacement starts, down to half the
// desired count; with static host ports (maximumPercent 100, one task per instance) and with the
// distinctInstance constraint only an instance without the service's task can take the replacement. Each
// rollout ends with 3 instances in 3 AZs, every task back, and the checker held RUNNING to desired ×
// minimumHealthyPercent on every change.
func TestC23DeploymentConfigurationDecidesTheDrain(t *testing.T) {
	for _, tc := range []struct {
		name           string
		desired        int
		deployment     sim.ServiceDeployment
		lowest, dipsTo int // RUNNING never below lowest; it does reach dipsTo
	}{
		{name: "minimumHealthyPercent 50, maximumPercent 100", desired: 6,
			deployment: sim.ServiceDeployment{MinimumHealthyPercent: 50, MaximumPercent: 100}, lowest: 3, dipsTo: 5},
		{name: "static host ports, maximumPercent 100", desired: 3,
			deployment: sim.ServiceDeployment{MinimumHealthyPercent: 66, MaximumPercent: 100, StaticHostPort: true}, lowest: 2, dipsTo: 2},
		{name: "distinctInstance, 100/200", desired: 3,
			deployment: sim.ServiceDeployment{DistinctInstance: true}, lowest: 3, dipsTo: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := testworld.GroupSetup{Name: "cp-asg", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp")}
			spec := oneGroup(&g)
			spec.Services = map[string]int{"web": tc.desired}
			spec.ServiceDeployments = map[string]sim.ServiceDeployment{"web": tc.deployment}
			w := build(t, spec)
			settle(t, w, 2*time.Minute)
			before := shapeOf(w, g.Name)
			seen := runningRange(w, g.Cluster, "web")

			at := runC23(t, w, g.Parameter, g.Name)
			requireC23End(t, w, g.Name, before, at[g.Name], g.Max)
			require.Equal(t, tc.desired, w.Account.ServiceTasks(g.Cluster, "web"))
			require.GreaterOrEqual(t, seen[0], tc.lowest, "RUNNING never below desired x minimumHealthyPercent")
			require.LessOrEqual(t, seen[0], tc.dipsTo, "the deployment configuration lets ECS stop before it starts")
			if tc.deployment.MaximumPercent == 100 {
				require.LessOrEqual(t, seen[1], tc.desired, "maximumPercent 100: never more RUNNING than desired")
			}
			if tc.deployment.StaticHostPort || tc.deployment.DistinctInstance {
				for _, i := range w.Account.Group(g.Name).Instances {
					if i.LifecycleState == "InService" {
						require.Equal(t, 1, i.TasksByLastStatus["RUNNING"], "one task per instance on %s", i.ID)
					}
				}
			}
		})
	}
}

// A standalone task (an AWS Batch job here) on an outdated instance is never counted as drained: ECS does not
// move it, so the drain of the first old instance the refresh terminates waits for it until the drain deadline
// (30m); then the agent holds the drain (the default, patch-agent/standalone-tasks=wait; field case C9): the
// instance is back in service with its task still running, one DrainDeadline alert says held, and the rollout
// halts without a rollback, its reason naming the instance and the standalone task. The agent never stops the
// task itself.
func TestC23StandaloneTaskIsNeverCountedAsDrained(t *testing.T) {
	g := testworld.GroupSetup{Name: "cp-asg", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp")}
	w := buildAlerting(t, oneGroup(&g), g)
	settle(t, w.World, 2*time.Minute)
	olds := map[string]bool{}
	for _, i := range w.Account.Group(g.Name).Instances {
		require.True(t, w.Account.RunStandaloneTask(i.ID, "AWS Batch"), i.ID)
		olds[i.ID] = true
	}
	w.PublishAMI(g.Parameter, testworld.ImageB)
	r := runTo(t, w.World, 6*time.Hour, "halted", func(r state.Rollout) bool { return r.Phase == state.PhaseHalted }, g.Name)
	require.Contains(t, r.Reason, "standalone (started by no service")
	rec := requireDrainHeld(t, w, 30*time.Minute)
	require.True(t, olds[rec.InstanceID], "an old instance is held: %s", rec.InstanceID)
	var requested time.Time
	for _, term := range w.Account.Terminations() {
		if term.InstanceID == rec.InstanceID {
			requested = term.RequestedAt
		}
	}
	require.GreaterOrEqual(t, rec.DrainHeldAt.Sub(requested), 30*time.Minute, "%s: drained until the drain deadline", rec.InstanceID)
	inst, ok := w.Account.Instance(rec.InstanceID)
	require.True(t, ok)
	require.Positive(t, inst.TasksByLastStatus["RUNNING"], "its standalone task still runs")
	for _, c := range w.Account.LifecycleCompletions() {
		require.False(t, c.Caller == sim.CallerAPI && c.Accepted && c.Transition == sim.TransitionTerminating && olds[c.InstanceID] && !c.Drained,
			"%s: terminated with its standalone task", c.InstanceID)
	}
	require.Zero(t, w.Account.Calls()["ecs:StopTask"], "the agent never stops the task")
	requireNoCapacityWrites(t, w.World, g.Name)
	require.Empty(t, w.Checker.Violations)
}

// c23CrashScenario is a C23 layout under the crash matrix: spec's capacity-provider groups (all on parameter)
// roll to ImageB together; at the end every group has, at its rollout's completion, the size and AZ spread it
// had at the start, every in-service instance on ImageB and ACTIVE, max size as it was, every service back at
// its desired count, every termination's lifecycle action completed by the agent and the queue empty.
// (RunCrashScenario adds every invariant on every change, Checker.Finish, no repeated effect and no
// desired capacity written by the agent.)
func c23CrashScenario(name string, spec func() testworld.Spec, parameter string) crash.CrashScenario {
	var before, completed map[string]groupShape
	var maxBefore map[string]int32
	groups := func(*testworld.World) []string {
		var out []string
		for _, g := range spec().Groups {
			out = append(out, g.Name)
		}
		return out
	}
	return crash.CrashScenario{
		Name: name,
		Build: func() (*testworld.World, error) {
			return testworld.Build(spec())
		},
		Drive: func(w *testworld.World) error {
			ctx := context.Background()
			before, completed, maxBefore = map[string]groupShape{}, map[string]groupShape{}, map[string]int32{}
			if _, err := w.RunUntil(ctx, tick, 2*time.Minute, func() bool { return false }); err != nil {
				return err
			}
			for _, g := range groups(w) {
				before[g], maxBefore[g] = shapeOf(w, g), w.Account.Group(g).Max
			}
			w.PublishAMI(parameter, testworld.ImageB)
			done, err := w.RunUntil(ctx, tick, 6*time.Hour, func() bool {
				for _, g := range groups(w) {
					if _, seen := completed[g]; !seen && w.Rollout(ctx, g).Phase == state.PhaseCompleted {
						completed[g] = shapeOf(w, g)
					}
				}
				return len(completed) == len(before)
			})
			if err != nil {
				return err
			}
			if !done {
				return fmt.Errorf("rollouts did not complete: %d of %d", len(completed), len(before))
			}
			done, err = w.RunUntil(ctx, tick, time.Hour, func() bool {
				visible, inFlight := w.Account.QueueDepth(w.QueueURL)
				return visible+inFlight == 0
			})
			if err != nil {
				return err
			}
			if !done {
				return errors.New("messages left on the queue")
			}
			_, err = w.RunUntil(ctx, tick, time.Minute, func() bool { return false })
			return err
		},
		Final: func(w *testworld.World) error {
			for _, g := range groups(w) {
				if r := w.Rollout(context.Background(), g); r.Strategy != model.StrategyRefresh {
					return fmt.Errorf("%s rolled with strategy %q", g, r.Strategy)
				}
				if !reflect.DeepEqual(before[g], completed[g]) {
					return fmt.Errorf("%s: %+v at the start, %+v at completion\n%s", g, before[g], completed[g], trace(w, g))
				}
				grp := w.Account.Group(g)
				if grp.Max != maxBefore[g] {
					return fmt.Errorf("%s: max %d, %d at the start", g, grp.Max, maxBefore[g])
				}
				for _, i := range grp.Instances {
					if i.LifecycleState == "InService" && (i.ImageID != testworld.ImageB || i.ContainerInstanceStatus != "ACTIVE") {
						return fmt.Errorf("%s: instance %s on %s, %s", g, i.ID, i.ImageID, i.ContainerInstanceStatus)
					}
				}
				if err := hooksAndQueueSettled(w, g); err != nil {
					return err
				}
			}
			s := spec()
			for svc, n := range s.Services {
				if got := w.Account.ServiceTasks(s.Groups[0].Cluster, svc); got != n {
					return fmt.Errorf("service %s: %d RUNNING, desired %d", svc, got, n)
				}
			}
			return nil
		},
	}
}

// c23Layout returns a one-group C23 spec (group cp-asg, cluster c1, 3 of max maxSize) with services tasks of
// service web under deployment d.
func c23Layout(maxSize int32, tasks int, d *sim.ServiceDeployment) func() testworld.Spec {
	return func() testworld.Spec {
		g := testworld.GroupSetup{Name: "cp-asg", Min: 1, Max: maxSize, Desired: 3, CapacityProvider: c23Provider("cp")}
		spec := oneGroup(&g)
		spec.Services = map[string]int{"web": tasks}
		if d != nil {
			spec.ServiceDeployments = map[string]sim.ServiceDeployment{"web": *d}
		}
		return spec
	}
}

// Standalone tasks, the "refuse" choice: a group tagged patch-agent/standalone-tasks=refuse with a standalone
// task on one outdated instance halts before it changes anything, with a reason on status naming the instance
// and the tag; nothing was changed (no desired capacity set by the agent, no instance DRAINING or terminated),
// and every invariant held. The default (wait) is TestC23StandaloneTaskIsNeverCountedAsDrained.
func TestC23StandaloneTasksRefuseTheGroup(t *testing.T) {
	for _, provider := range []bool{true, false} {
		t.Run(fmt.Sprintf("capacity provider %t", provider), func(t *testing.T) {
			g := testworld.GroupSetup{Name: "cp-asg", Min: 1, Max: 6, Desired: 3,
				Tags: map[string]string{model.TagStandaloneTasks: "Refuse"}}
			if provider {
				g.CapacityProvider = c23Provider("cp")
			}
			w := build(t, oneGroup(&g))
			settle(t, w, 2*time.Minute)
			batch := w.Account.Group(g.Name).Instances[1].ID
			require.True(t, w.Account.RunStandaloneTask(batch, "AWS Batch"))
			draining := 0
			w.Account.OnChange(func(v *sim.View) {
				for _, i := range v.Group(g.Name).Instances {
					if i.ContainerInstanceStatus == "DRAINING" {
						draining++
					}
				}
			})
			ctx := context.Background()
			w.PublishAMI(g.Parameter, testworld.ImageB)
			done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseHalted })
			require.NoError(t, err)
			r := w.Rollout(ctx, g.Name)
			require.True(t, done, "rollout: %+v", r)
			require.Contains(t, r.Reason, "group refused (tag patch-agent/standalone-tasks=refuse)")
			require.Contains(t, r.Reason, batch+" (1)")
			require.Nil(t, r.Current, "refused before the refresh")
			require.Nil(t, r.Refresh, "refused before the refresh")
			require.Zero(t, w.Account.Calls()["autoscaling:StartInstanceRefresh"])
			require.Zero(t, draining, "nothing drained")
			require.Empty(t, w.Account.Terminations())
			require.Empty(t, w.Checker.Violations)
		})
	}
}

// The Auto Scaling group of an AWS Batch compute environment (tag AWSBatchServiceTag, which AWS Batch puts on
// the groups it creates) is refused before anything changes: no launch template version, no refresh, no drain;
// the reason says to update the compute environment through AWS Batch.
func TestC23AWSBatchComputeEnvironmentGroupIsRefused(t *testing.T) {
	g := testworld.GroupSetup{Name: "batch-asg", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp"),
		Tags: map[string]string{engine.TagAWSBatchService: "batch"}}
	w := build(t, oneGroup(&g))
	settle(t, w, 2*time.Minute)
	lt, ok := w.Account.LaunchTemplate(w.Account.Group(g.Name).LaunchTemplateID)
	require.True(t, ok)
	versions := len(lt.ImageIDs)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseHalted })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.True(t, done, "rollout: %+v", r)
	require.Contains(t, r.Reason, "belongs to an AWS Batch compute environment (tag AWSBatchServiceTag=batch)")
	require.Contains(t, r.Reason, "UpdateComputeEnvironment")
	lt, _ = w.Account.LaunchTemplate(w.Account.Group(g.Name).LaunchTemplateID)
	require.Len(t, lt.ImageIDs, versions, "no launch template version")
	for _, c := range w.Account.DesiredChanges(g.Name) {
		require.NotEqual(t, sim.CallerAPI, c.By, "no capacity write")
	}
	require.Empty(t, w.Account.Terminations())
	require.Empty(t, w.Checker.Violations)
}

// Field case C23, two groups of one cluster with the service's own capacity provider strategy (cp-a and cp-b,
// weight 1 each): a task displaced from a drained instance may only go to the provider the strategy picks — it
// balances the live tasks per provider, so a drain in one group sends tasks to the other — and waiting tasks
// are credited to that provider's managed scaling. Both rollouts, each by its instance refresh, complete on
// ImageB, without a capacity write of the agent, with one drain per cluster at a time and every task back;
// each group ends with as many instances as at the start less those ECS managed scaling took away by lowering
// its desired capacity (an empty replacement left idle for 15 minutes is ECS's to scale in), and loses a zone
// only by such a scale in.
func TestC23TwoGroupsWithAServiceCapacityProviderStrategyComplete(t *testing.T) {
	a := testworld.GroupSetup{Name: "cp-a", Cluster: "shared", Parameter: "/golden/shared", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp-a")}
	b := testworld.GroupSetup{Name: "cp-b", Cluster: "shared", Parameter: "/golden/shared", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp-b")}
	w := build(t, testworld.Spec{Groups: []testworld.GroupSetup{a, b}, Services: map[string]int{"web": 12},
		ServiceDeployments: map[string]sim.ServiceDeployment{"web": {CapacityProviderStrategy: []sim.StrategyItem{
			{CapacityProvider: "cp-a", Weight: 1}, {CapacityProvider: "cp-b", Weight: 1}}}}})
	maxDraining := 0
	w.Account.OnChange(func(v *sim.View) {
		n := 0
		for _, g := range v.Groups() {
			for _, i := range g.Instances {
				if i.ContainerInstanceStatus == "DRAINING" && (i.LifecycleState == "InService" || i.LifecycleState == "Terminating:Wait") {
					n++
				}
			}
		}
		maxDraining = max(maxDraining, n)
	})
	settle(t, w, 2*time.Minute)
	before := map[string]groupShape{a.Name: shapeOf(w, a.Name), b.Name: shapeOf(w, b.Name)}
	ctx := context.Background()
	w.PublishAMI("/golden/shared", testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, 6*time.Hour, func() bool {
		return w.Rollout(ctx, a.Name).Phase == state.PhaseCompleted && w.Rollout(ctx, b.Name).Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "%+v / %+v", w.Rollout(ctx, a.Name), w.Rollout(ctx, b.Name))
	settle(t, w, 20*time.Minute)
	// The checker's size-and-spread rule excuses an instance only by a termination Auto Scaling records as a
	// scale in; a lowering of desired capacity by ECS during the refresh can instead be absorbed by the refresh
	// (one launch fewer), so the group's end is judged here against ECS's desired capacity changes, as in
	// TestC23RoomyLayoutByInstanceRefreshWritesNoCapacityAndLeavesTheSizeToECS.
	for _, v := range w.Checker.Finish() {
		require.Equal(t, 1, v.Invariant, "%v", v)
		require.Contains(t, v.Detail, "group ends", "%v", v)
	}
	require.Equal(t, 1, maxDraining, "one drain per cluster")
	for _, g := range []testworld.GroupSetup{a, b} {
		end, ecsScaleIns := shapeOf(w, g.Name), 0
		for _, c := range w.Account.DesiredChanges(g.Name) {
			require.Equal(t, "ecs", c.By, "only ECS managed scaling moves desired capacity: %+v", c)
			ecsScaleIns += int(c.From - c.To)
		}
		require.Equal(t, before[g.Name].InService-end.InService, ecsScaleIns, "%s: every instance gone is one ECS scaled in\n%s", g.Name, trace(w, g.Name))
		require.LessOrEqual(t, len(before[g.Name].PerAZ)-len(end.PerAZ), max(ecsScaleIns, 0), "%s: a zone lost only by ECS's scale in", g.Name)
		grp := w.Account.Group(g.Name)
		require.Equal(t, g.Max, grp.Max, "max size untouched")
		require.Equal(t, model.StrategyRefresh, w.Rollout(context.Background(), g.Name).Strategy)
		requireNoCapacityWrites(t, w, g.Name)
		for _, i := range grp.Instances {
			if i.LifecycleState == "InService" {
				require.Equal(t, testworld.ImageB, i.ImageID, i.ID)
				require.Equal(t, "ACTIVE", i.ContainerInstanceStatus, i.ID)
			}
		}
	}
	require.Equal(t, 12, w.Account.ServiceTasks("shared", "web"))
}

// Field case C23's roomy layout rolled by instance refresh (tag patch-agent/strategy=refresh, the agent's
// launching hook): ECS manages the instances' scale-in protection, so the refresh replaces protected instances
// (ScaleInProtectedInstances Refresh) and pauses at a checkpoint after each instance (spacing) so that
// CapacityProviderReservation sees the group at target between replacements. The agent writes no desired
// capacity and every invariant holds; the group's size is ECS's: the service's Availability Zone spread places
// displaced tasks where tasks still run, a replacement can stay empty, and managed scaling scales it in after 15
// minutes below target. Every instance the group ends without is one ECS scaled in, never one the agent took —
// why capacity-provider groups keep their own strategy by default (ChooseStrategy).
func TestC23RoomyLayoutByInstanceRefreshWritesNoCapacityAndLeavesTheSizeToECS(t *testing.T) {
	g := testworld.GroupSetup{Name: "cp-asg", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp"),
		Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
	w := build(t, oneGroup(&g))
	settle(t, w, 2*time.Minute)
	before := shapeOf(w, g.Name)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, 6*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.True(t, done, "%+v\n%s", r, trace(w, g.Name))
	require.Equal(t, model.StrategyRefresh, r.Strategy)
	require.True(t, r.Refresh.ReplaceProtected, "ECS manages the protection: ScaleInProtectedInstances Refresh")
	require.Equal(t, int32(300), r.Refresh.SpacingDelay)
	require.Equal(t, []int32{33, 66, 100}, r.Refresh.SpacingCheckpoints())
	settle(t, w, 20*time.Minute)
	require.Empty(t, w.Checker.Finish())
	requireNoCapacityWrites(t, w, g.Name)
	require.Equal(t, 6, w.Account.ServiceTasks(g.Cluster, "web"))
	end := shapeOf(w, g.Name)
	requireAllOn(t, w, g.Name, testworld.ImageB, end.InService)
	ecsScaleIns := 0
	for _, c := range w.Account.DesiredChanges(g.Name) {
		require.Equal(t, "ecs", c.By, "only ECS managed scaling moves desired capacity: %+v", c)
		if c.To < c.From {
			ecsScaleIns += int(c.From - c.To)
		}
	}
	require.Equal(t, before.InService-end.InService, ecsScaleIns, "every instance gone is one ECS scaled in\n%s", trace(w, g.Name))
	for _, term := range w.Account.Terminations() {
		require.Contains(t, []string{sim.CauseRefresh, sim.CauseScaleIn}, term.Cause, "%+v", term)
	}
}

// Field case C23's roomy layout rolled by instance refresh, its service with Availability Zone rebalancing
// (the default of services created since mid-2025): the displaced tasks the service's spread placed in the
// other zones move back to the zone's new instance, so managed scaling never sees it idle and the group ends
// with 3 instances in 3 AZs, all on the new AMI, while the agent writes no desired capacity.
func TestC23RoomyLayoutByInstanceRefreshKeepsSizeAndSpreadWithAZRebalancing(t *testing.T) {
	g := testworld.GroupSetup{Name: "cp-asg", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp"),
		Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
	w := build(t, oneGroup(&g))
	w.Account.SetServiceDeployment(g.Cluster, "web", sim.ServiceDeployment{AvailabilityZoneRebalancing: true})
	settle(t, w, 2*time.Minute)
	before := shapeOf(w, g.Name)
	require.Equal(t, 3, len(before.PerAZ), "the layout starts in 3 AZs")
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, 6*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "%+v\n%s", w.Rollout(ctx, g.Name), trace(w, g.Name))
	completed := shapeOf(w, g.Name)
	settle(t, w, 20*time.Minute)
	require.Empty(t, w.Checker.Finish())
	requireNoCapacityWrites(t, w, g.Name)
	requireC23End(t, w, g.Name, before, completed, g.Max)
	require.Equal(t, before, shapeOf(w, g.Name), "ECS has no idle instance to scale in afterwards\n%s", trace(w, g.Name))
	require.Equal(t, 6, w.Account.ServiceTasks(g.Cluster, "web"))
}
