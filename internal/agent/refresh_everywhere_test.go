package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/engine"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
)

// everywhereCase is a kind of group rolled by instance refresh beyond the plain one: built by build (the
// checker told that the agent writes no desired capacity), rolled by roll (an AMI published, or time passing
// for a maximum instance age) until its rollout completes, judged at the end by final (after every invariant,
// one refresh, no capacity write by the agent and every staying instance on image).
type everywhereCase struct {
	name  string
	group string
	build func() (*testworld.World, error)
	roll  func(ctx context.Context, w *testworld.World) error
	image string
	final func(w *testworld.World) error
}

// buildEverywhere builds spec's world with the rule that the agent writes no desired capacity, then setup.
func buildEverywhere(spec testworld.Spec, setup func(w *testworld.World) error) func() (*testworld.World, error) {
	return func() (*testworld.World, error) {
		w, err := testworld.Build(spec)
		if err != nil {
			return nil, err
		}
		if setup != nil {
			err = setup(w)
		}
		return w, err
	}
}

// everywhereCases: a warm pool that takes scaled-in instances back (ReuseOnScaleIn) with a refresh that lets
// scale outs draw old-AMI pool instances (each abandoned on the launching hook, so none enters service once the
// rollout started), a mixed-instances group (a MixedInstancesPolicy desired configuration), and a maximum
// instance age (a refresh that replaces every instance, on the AMI they already run).
func everywhereCases() []everywhereCase {
	warm := testworld.GroupSetup{Name: "warm", Min: 2, Max: 5, Desired: 2}
	warmSpec := oneGroup(&warm)
	warmSpec.Sim.RefreshDrawsOutdatedPoolInstances = true
	var oldEntered []string
	mixed := testworld.GroupSetup{Name: "mixed", Min: 2, Max: 5, Desired: 3, MixedInstances: true,
		Overrides: []string{"m7g.large", "m6g.large"}}
	aged := testworld.GroupSetup{Name: "aged", Min: 3, Max: 6, Desired: 3,
		Tags: map[string]string{model.TagMaxInstanceAge: "1d"}}
	publishTo := func(g testworld.GroupSetup) func(ctx context.Context, w *testworld.World) error {
		return func(ctx context.Context, w *testworld.World) error {
			w.PublishAMI(g.Parameter, testworld.ImageB)
			return nil
		}
	}
	return []everywhereCase{
		{name: "warm pool with ReuseOnScaleIn", group: warm.Name, image: testworld.ImageB,
			build: buildEverywhere(warmSpec, func(w *testworld.World) error {
				oldEntered = nil
				if err := w.Account.PutWarmPool(warm.Name, sim.WarmPoolSpec{MinSize: 2, ReuseOnScaleIn: true}); err != nil {
					return err
				}
				if _, err := w.RunUntil(context.Background(), tick, 10*time.Minute, func() bool { return false }); err != nil {
					return err
				}
				serving := map[string]bool{}
				for _, i := range w.Account.Group(warm.Name).Instances {
					serving[i.ID] = true
				}
				w.Account.OnChange(func(v *sim.View) {
					r, err := w.Store.GetRollout(context.Background(), warm.Name)
					if err != nil || r.Phase == state.PhaseIdle {
						return
					}
					for _, i := range v.Group(warm.Name).Instances {
						if i.LifecycleState == "InService" && i.ImageID != testworld.ImageB && !serving[i.ID] {
							serving[i.ID] = true
							oldEntered = append(oldEntered, i.ID)
						}
					}
				})
				return nil
			}),
			roll: func(ctx context.Context, w *testworld.World) error {
				w.PublishAMI(warm.Parameter, testworld.ImageB)
				if _, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
					r := w.Rollout(ctx, warm.Name)
					return r.Refresh != nil && r.Refresh.Status == providers.RefreshInProgress
				}); err != nil {
					return err
				}
				return w.Account.SetDesiredCapacity(warm.Name, 4) // another writer scales out: the pool is drawn on
			},
			final: func(w *testworld.World) error {
				if len(oldEntered) > 0 {
					return fmt.Errorf("old-AMI instances entered service from the pool: %v", oldEntered)
				}
				for _, i := range w.Account.WarmPool(warm.Name) {
					if i.ImageID != testworld.ImageB {
						return fmt.Errorf("pool instance %s runs %s", i.ID, i.ImageID)
					}
				}
				return nil
			}},
		{name: "mixed instances", group: mixed.Name, image: testworld.ImageB, build: buildEverywhere(oneGroup(&mixed), nil), roll: publishTo(mixed),
			final: func(w *testworld.World) error {
				if r := w.Rollout(context.Background(), mixed.Name); r.Refresh == nil || !r.Refresh.MixedInstances {
					return errors.New("the refresh did not name a MixedInstancesPolicy")
				}
				return nil
			}},
		{name: "maximum instance age", group: aged.Name, image: testworld.ImageA, build: buildEverywhere(oneGroup(&aged), nil),
			roll: func(ctx context.Context, w *testworld.World) error {
				_, err := w.RunUntil(ctx, 10*time.Minute, 23*time.Hour+50*time.Minute, func() bool { return false })
				return err
			},
			final: func(w *testworld.World) error {
				if r := w.Rollout(context.Background(), aged.Name); r.Trigger != engine.TriggerMaxInstanceAge || r.Refresh == nil || !r.Refresh.ReplaceAll {
					return fmt.Errorf("not a maximum-age refresh of every instance: %+v", r)
				}
				return nil
			}},
	}
}

// playEverywhere rolls c's world, calls rolled (when set), and runs until the rollout completes and every
// message is handled, then 15 minutes more.
func playEverywhere(ctx context.Context, w *testworld.World, c everywhereCase, rolled func()) error {
	if err := c.roll(ctx, w); err != nil {
		return err
	}
	if rolled != nil {
		rolled()
	}
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return w.Rollout(ctx, c.group).Phase == state.PhaseCompleted })
	if err != nil {
		return err
	}
	if !done {
		r := w.Rollout(ctx, c.group)
		return fmt.Errorf("the rollout did not complete: %s %s", r.Phase, r.Reason)
	}
	if _, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		visible, inFlight := w.Account.QueueDepth(w.QueueURL)
		return visible+inFlight == 0
	}); err != nil {
		return err
	}
	_, err = w.RunUntil(ctx, tick, 15*time.Minute, func() bool { return false })
	return err
}

// judgeEverywhere is the end check shared by every run of c: one refresh, no capacity write by the agent,
// every staying instance InService on c.image, then c.final.
func judgeEverywhere(w *testworld.World, c everywhereCase) error {
	if n := refreshCalls(w, "autoscaling:StartInstanceRefresh"); n != 1 {
		return fmt.Errorf("%d StartInstanceRefresh calls, want 1", n)
	}
	for _, cw := range w.Account.CapacityWrites() {
		if cw.Group == c.group && cw.By == sim.CallerAPI && (cw.Op == sim.OpSetDesiredCapacity || cw.Decrement ||
			(cw.Op == sim.OpUpdateAutoScalingGroup && (cw.From != cw.To || cw.MaxFrom != cw.MaxTo))) {
			return fmt.Errorf("the agent wrote %s", cw)
		}
	}
	for _, i := range w.Account.Group(c.group).Instances {
		if strings.HasPrefix(i.LifecycleState, "Terminating") {
			continue
		}
		if i.LifecycleState != "InService" || i.ImageID != c.image {
			return fmt.Errorf("%s is %s on %s", i.ID, i.LifecycleState, i.ImageID)
		}
	}
	return c.final(w)
}

// Warm pools, mixed instances and maximum instance age rolled by instance refresh: each completes with every
// invariant held, one refresh and no desired capacity, MaxSize or protection written by the agent, once
// plainly, beside a seeded random autoscaler (testenv.Seeds; started once the rollout's cause is there: the AMI
// published, the instances of age) and under the crash matrix (the agent killed after
// every effect, and with every effect's response lost).
func TestRefreshEverywhereCompletesBesideAWriterAndUnderTheCrashMatrix(t *testing.T) {
	for _, c := range everywhereCases() {
		t.Run(c.name, func(t *testing.T) {
			w, err := c.build()
			require.NoError(t, err)
			require.NoError(t, playEverywhere(context.Background(), w, c, nil))
			require.Empty(t, w.Checker.Finish())
			require.NoError(t, judgeEverywhere(w, c))
		})
		for _, seed := range testenv.Seeds(t, []uint64{1, 2}) {
			t.Run(fmt.Sprintf("%s beside a random autoscaler seed %d", c.name, seed), func(t *testing.T) {
				w, err := c.build()
				require.NoError(t, err)
				var writer *sim.RandomWriter
				require.NoError(t, playEverywhere(context.Background(), w, c, func() {
					writer = w.Account.StartRandomWriter(sim.RandomWriterSpec{Group: c.group, Seed: seed})
				}))
				writer.Stop()
				settle(t, w, 15*time.Minute) // the launches of the writer's last scale out through the launching hook
				require.NotEmpty(t, writer.Writes(), "the random writer wrote")
				require.Empty(t, w.Checker.Finish())
				require.NoError(t, judgeEverywhere(w, c))
			})
		}
		t.Run(c.name+" crash matrix", func(t *testing.T) {
			runCrashMatrix(t, crash.CrashScenario{Name: c.name, Build: c.build,
				Drive: func(w *testworld.World) error { return playEverywhere(context.Background(), w, c, nil) },
				Final: func(w *testworld.World) error {
					if err := judgeEverywhere(w, c); err != nil {
						return err
					}
					return hooksAndQueueSettled(w, c.group)
				}})
		})
	}
}
