package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// byRefresh turns a C23 layout into its instance-refresh form: every group gets the agent's launching hook and
// the automatic strategy (instance refresh), and every replica service Availability Zone rebalancing, the
// default of services ECS creates today (sim.ServiceDeployment.AvailabilityZoneRebalancing).
func byRefresh(spec func() testworld.Spec) func() testworld.Spec {
	return func() testworld.Spec {
		s := spec()
		deployments := map[string]sim.ServiceDeployment{}
		for svc := range s.Services {
			d := s.ServiceDeployments[svc]
			d.AvailabilityZoneRebalancing = true
			deployments[svc] = d
		}
		s.ServiceDeployments = deployments
		return s
	}
}

// c23RefreshLayouts are field case C23's layouts rolled by instance refresh; atMax marks the full group at its
// MaxSize, which a refresh that launches before it terminates cannot roll: it waits with a reason that says so.
var c23RefreshLayouts = []struct {
	name      string
	spec      func() testworld.Spec
	parameter string
	atMax     bool
}{
	{"roomy 3 AZs", byRefresh(c23Layout(6, 6, nil)), "/golden/cp-asg", false},
	{"full bin-packed group at max", byRefresh(c23Layout(3, 30, nil)), "/golden/cp-asg", true},
	{"two groups of one cluster", byRefresh(func() testworld.Spec {
		a := testworld.GroupSetup{Name: "cp-a", Cluster: "shared", Parameter: "/golden/shared", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp-a")}
		b := testworld.GroupSetup{Name: "cp-b", Cluster: "shared", Parameter: "/golden/shared", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp-b")}
		return testworld.Spec{Groups: []testworld.GroupSetup{a, b}, Services: map[string]int{"web": 12}}
	}), "/golden/shared", false},
	{"minimumHealthyPercent 50", byRefresh(c23Layout(6, 6, &sim.ServiceDeployment{MinimumHealthyPercent: 50, MaximumPercent: 100})), "/golden/cp-asg", false},
	{"static host ports, maximumPercent 100", byRefresh(c23Layout(6, 3,
		&sim.ServiceDeployment{MinimumHealthyPercent: 66, MaximumPercent: 100, StaticHostPort: true})), "/golden/cp-asg", false},
	{"distinctInstance", byRefresh(c23Layout(6, 3, &sim.ServiceDeployment{DistinctInstance: true})), "/golden/cp-asg", false},
}

// Field case C23 by instance refresh, layout by layout: ECS capacity-provider groups (managed scaling, managed
// termination protection) roll by the automatic strategy, an instance refresh, and end with the size and
// Availability Zone spread they had, every instance on the new AMI and ACTIVE, MaxSize as it was, every
// service at its desired count and every invariant held, while the agent writes no desired capacity, MaxSize
// or scale-in protection, one instance refresh per group. The full group at its MaxSize is refused as
// documented: it waits, nothing replaced, with a reason that names MaxSize.
func TestC23LayoutsByInstanceRefresh(t *testing.T) {
	for _, l := range c23RefreshLayouts {
		t.Run(l.name, func(t *testing.T) {
			spec := l.spec()
			w := build(t, spec)
			settle(t, w, 2*time.Minute)
			before := map[string]groupShape{}
			for _, g := range spec.Groups {
				before[g.Name] = shapeOf(w, g.Name)
			}
			ctx := context.Background()
			w.PublishAMI(l.parameter, testworld.ImageB)
			if l.atMax {
				_, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return false })
				require.NoError(t, err)
				r := w.Rollout(ctx, spec.Groups[0].Name)
				require.Equal(t, model.StrategyRefresh, r.Strategy)
				require.Contains(t, r.Reason, "MaxSize", "%+v", r)
				require.Zero(t, r.OnTarget)
				require.Equal(t, before[spec.Groups[0].Name], shapeOf(w, spec.Groups[0].Name))
				require.Empty(t, w.Checker.Finish())
				requireNoCapacityWrites(t, w, spec.Groups[0].Name)
				return
			}
			completed := map[string]groupShape{}
			done, err := w.RunUntil(ctx, tick, 6*time.Hour, func() bool {
				for _, g := range spec.Groups {
					if _, seen := completed[g.Name]; !seen && w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted {
						completed[g.Name] = shapeOf(w, g.Name)
					}
				}
				return len(completed) == len(spec.Groups)
			})
			require.NoError(t, err)
			require.True(t, done, "%d of %d rollouts completed", len(completed), len(spec.Groups))
			settle(t, w, 20*time.Minute)
			require.Empty(t, w.Checker.Finish())
			for _, g := range spec.Groups {
				require.Equal(t, model.StrategyRefresh, w.Rollout(ctx, g.Name).Strategy)
				requireC23End(t, w, g.Name, before[g.Name], completed[g.Name], g.Max)
				require.Equal(t, before[g.Name], shapeOf(w, g.Name), "%s: ECS has no idle instance to scale in afterwards\n%s", g.Name, trace(w, g.Name))
				requireNoCapacityWrites(t, w, g.Name)
			}
			for svc, n := range spec.Services {
				require.Equal(t, n, w.Account.ServiceTasks(spec.Groups[0].Cluster, svc), svc)
			}
			require.Equal(t, len(spec.Groups), refreshCalls(w, "autoscaling:StartInstanceRefresh"),
				"one refresh per group replaces all of it (its last checkpoint is 100)")
		})
	}
}

// Field case C23 by instance refresh under the crash matrix: every layout but the refused one, crashed after
// every effect and with every effect's response lost, completes with the group's size and spread, every
// invariant held (no desired capacity written by the agent among them) and no effect repeated.
func TestC23LayoutsByInstanceRefreshCrashMatrix(t *testing.T) {
	for _, l := range c23RefreshLayouts {
		if l.atMax {
			continue
		}
		t.Run(l.name, func(t *testing.T) {
			runCrashMatrix(t, c23CrashScenario("C23 by refresh: "+l.name, l.spec, l.parameter))
		})
	}
}

// Field cases C23 and C24 together: each C23 layout rolled by instance refresh beside a seeded random
// autoscaler (testenv.Seeds) and ECS managed scaling completes with every invariant held — serving capacity
// never below what the others set because of the agent — and the agent writes no desired capacity, MaxSize or
// scale-in protection. (The full group at its MaxSize is refused, TestC23LayoutsByInstanceRefresh.)
func TestC23LayoutsByInstanceRefreshBesideARandomAutoscaler(t *testing.T) {
	for _, seed := range testenv.Seeds(t, []uint64{1, 2}) {
		for _, l := range c23RefreshLayouts {
			if l.atMax {
				continue
			}
			t.Run(fmt.Sprintf("%s seed %d", l.name, seed), func(t *testing.T) {
				spec := l.spec()
				w := build(t, spec)
				settle(t, w, 2*time.Minute)
				ctx := context.Background()
				var writers []*sim.RandomWriter
				for _, g := range spec.Groups {
					writers = append(writers, w.Account.StartRandomWriter(sim.RandomWriterSpec{Group: g.Name, Seed: seed}))
				}
				w.PublishAMI(l.parameter, testworld.ImageB)
				done, err := w.RunUntil(ctx, tick, 6*time.Hour, func() bool {
					for _, g := range spec.Groups {
						if r := w.Rollout(ctx, g.Name); r.Phase != state.PhaseCompleted {
							return false
						}
					}
					return true
				})
				require.NoError(t, err)
				writes := 0
				for _, wr := range writers {
					wr.Stop()
					writes += len(wr.Writes())
				}
				var phases []string
				for _, g := range spec.Groups {
					r := w.Rollout(ctx, g.Name)
					phases = append(phases, fmt.Sprintf("%s %s %s", g.Name, r.Phase, r.Reason))
				}
				require.True(t, done, strings.Join(phases, "\n"))
				require.NotZero(t, writes, "the random writer wrote")
				settle(t, w, 20*time.Minute)
				require.Empty(t, w.Checker.Finish())
				for _, g := range spec.Groups {
					requireNoCapacityWrites(t, w, g.Name)
					requireAllOn(t, w, g.Name, testworld.ImageB, shapeOf(w, g.Name).InService)
				}
				t.Logf("seed %d: %d writes of the random writers", seed, writes)
			})
		}
	}
}
