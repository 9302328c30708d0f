package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// scenario is one `patch-agent demo --scenario NAME`.
type scenario struct {
	name, description string
	// expect is the state the demo group must end in.
	expect state.Phase
	// setup changes the world's spec before it is built; prepare the world before the AMI changes.
	setup   func(*testworld.Spec)
	prepare func(*testworld.World)
	// during runs after every agent iteration.
	during func(context.Context, *testworld.World, *printer) error
	// stop ends the run early (default: the rollout to ImageB ended).
	stop func(state.Rollout, *testworld.World) bool
	// crash kills the agent after every rollout step transition and starts a fresh one.
	crash bool
}

var scenarios = map[string]scenario{
	"rollout": {name: "rollout", expect: state.PhaseCompleted,
		description: "the golden AMI changes; one instance refresh per group replaces one instance at a time (launch before terminate), " +
			"each new instance held by the agent's launching hook until it serves, each old one drained"},
	"crash": {name: "crash", expect: state.PhaseCompleted, crash: true,
		description: "the agent is killed right after every step transition and a fresh one resumes from the store"},
	"bad-ami": {name: "bad-ami", expect: state.PhaseRolledBack,
		description: "instances of the new AMI never serve: the agent abandons the first one's launching action, halts the instance refresh and rolls it back",
		prepare:     func(w *testworld.World) { w.Account.MarkImageUnhealthy(testworld.ImageB) }},
	"pause": {name: "pause", expect: state.PhaseCompleted,
		description: "a global pause is set while the first old instance drains and held for 30 minutes: the instance refresh is cancelled " +
			"(the instance in flight finishes); the resume starts a new one that skips the instances already on the AMI",
		during: pauseOnFirstDrain},
	"soak": {name: "soak", expect: state.PhaseWaiting,
		description: "the group requires a 48h minimum AMI age; the fresh AMI waits",
		setup:       withTag(model.TagMinAMIAge, "48h"),
		stop: func(r state.Rollout, w *testworld.World) bool {
			return r.Phase == state.PhaseWaiting && w.Account.Clock().Since(r.DetectedAt) > 10*time.Minute
		}},
	"refused-ami": {name: "refused-ami", expect: state.PhaseWaiting,
		description: "the parameters name an AMI of an account outside the allow-list: the AMI gate refuses it and nothing is touched",
		prepare: func(w *testworld.World) {
			w.Account.RegisterImage(sim.ImageSpec{ID: testworld.ImageB, Name: "al2023-ami-ecs-hvm-2023.0.20261129-kernel-6.1-" + w.Arch,
				Architecture: w.Arch, OwnerID: "999988887777", Created: w.Account.Clock().Now().Add(-time.Hour)})
		},
		stop: func(r state.Rollout, w *testworld.World) bool {
			return r.Phase == state.PhaseWaiting && strings.HasPrefix(r.Reason, "AMI refused") && w.Account.Clock().Since(r.DetectedAt) > 10*time.Minute
		}},
	"ecs-capacity-provider": {name: "ecs-capacity-provider", expect: state.PhaseCompleted,
		description: "the ECS group is a capacity provider with managed scaling and termination protection, 3 instances in 3 AZs " +
			"with room for 10 tasks each, its service with Availability Zone rebalancing: one instance refresh replaces the " +
			"protected instances; ECS keeps the size and moves the displaced tasks back to each new instance's zone",
		setup: ecsCapacityProvider},
	"refresh": {name: "refresh", expect: state.PhaseCompleted,
		description: "the groups are tagged patch-agent/strategy=refresh and have the agent's launching hook: one instance refresh " +
			"per group replaces them (launch before terminate); the agent holds each new instance until it serves, drains each old " +
			"one and never writes desired capacity",
		setup: func(s *testworld.Spec) {
			withTag(model.TagStrategy, model.StrategyRefresh)(s)
			for i := range s.Groups {
				s.Groups[i].Max = s.Groups[i].Desired + 1
			}
		}},
	"window": {name: "window", expect: state.PhaseCompleted,
		description: "maintenance window daily 03:00-04:00 UTC; the AMI arrives at 02:00 and waits for it",
		setup:       withTag(model.TagMaintenanceWindow, "0 3 * * * 1h UTC")},
}

// Scenarios lists the scenario names, sorted.
func Scenarios() []string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func lookupScenario(name string) (scenario, error) {
	if name == "" {
		name = "rollout"
	}
	sc, ok := scenarios[name]
	if !ok {
		return scenario{}, fmt.Errorf("unknown scenario %q: want one of %s", name, strings.Join(Scenarios(), ", "))
	}
	return sc, nil
}

func withTag(key, value string) func(*testworld.Spec) {
	return func(s *testworld.Spec) {
		for i := range s.Groups {
			if s.Groups[i].Tags == nil {
				s.Groups[i].Tags = map[string]string{}
			}
			s.Groups[i].Tags[key] = value
		}
	}
}

// crashEveryWrite returns a fuse that blows right after the next rollout write.
func crashEveryWrite() *testworld.Fuse {
	return &testworld.Fuse{OnWrite: func(state.Rollout) bool { return true }}
}

// pauseOnFirstDrain sets a global pause when the first old instance of the ECS group starts draining (its
// container instance DRAINING under the instance refresh) and lifts it 30 simulated minutes later.
func pauseOnFirstDrain(ctx context.Context, w *testworld.World, p *printer) error {
	r, err := w.Store.GetRollout(ctx, testworld.GroupName)
	if err != nil {
		return nil
	}
	locks, err := w.Store.ListLocks(ctx)
	if err != nil {
		return err
	}
	now := w.Account.Clock().Now()
	draining := false
	if r.Refresh != nil {
		for _, i := range w.Account.Group(testworld.GroupName).Instances {
			draining = draining || i.ContainerInstanceStatus == "DRAINING"
		}
	}
	switch {
	case len(locks) == 0 && draining && !p.paused:
		p.paused, p.pausedAt = true, now
		p.linef("operator: patch-agent pause --reason \"incident 4711\"")
		return w.Store.PutLock(ctx, state.Lock{Reason: "incident 4711", Who: "operator", Since: now})
	case len(locks) > 0 && now.Sub(p.pausedAt) >= 30*time.Minute:
		p.linef("operator: patch-agent resume")
		return w.Store.DeleteLock(ctx, state.GlobalScope)
	}
	return nil
}

// ecsCapacityProvider makes the demo's ECS group C23's roomy layout: an ECS capacity provider with managed scaling
// (target 100 %) and managed termination protection, desired 3 of min 1 / max 6 across the account's 3 AZs, the
// demo's 6 service tasks with room for 10 per instance (sim.Options.MaxTasksPerInstance default), the service
// with Availability Zone rebalancing (the default of services ECS creates).
func ecsCapacityProvider(s *testworld.Spec) {
	for i := range s.Groups {
		if s.Groups[i].Platform == model.PlatformEKS {
			continue
		}
		s.Groups[i].Min = 1
		s.Groups[i].CapacityProvider = &sim.CapacityProviderSpec{Name: s.Groups[i].Name + "-cp", ManagedScaling: true, ManagedTerminationProtection: true}
	}
	d := s.ServiceDeployments["web"]
	d.AvailabilityZoneRebalancing = true
	if s.ServiceDeployments == nil {
		s.ServiceDeployments = map[string]sim.ServiceDeployment{}
	}
	s.ServiceDeployments["web"] = d
}
