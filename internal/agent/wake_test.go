package agent_test

import (
	"context"
	"sort"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// observedTargets records which targets each look reconciled.
type observedTargets struct {
	model.NopObserver
	mu    sync.Mutex
	names []string
}

func (o *observedTargets) TargetObserved(t model.Target, _ model.GroupView, _ state.Rollout, _ *model.ResolvedAMI) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.names = append(o.names, t.Group)
}

func (o *observedTargets) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.names
	o.names = nil
	sort.Strings(out)
	return out
}

// TestWakeUpIsAClaimThatOnlyMakesTheAgentLookAgainAtItsTargets: a wake-up event (launch result, container
// instance state change) is handled without any AWS call and without waiting for a reconcile; the look it
// asks for reconciles only the group it names, or the ECS groups of the cluster it names, and none for a group
// the agent does not manage.
func TestWakeUpIsAClaimThatOnlyMakesTheAgentLookAgainAtItsTargets(t *testing.T) {
	ctx := context.Background()
	obs := &observedTargets{}
	w, err := testworld.Build(testworld.Spec{Observer: obs, Groups: []testworld.GroupSetup{
		{Name: "a", Cluster: "ca", Parameter: "/golden/a", Min: 1, Max: 2, Desired: 1},
		{Name: "b", Cluster: "cb", Parameter: "/golden/b", Min: 1, Max: 2, Desired: 1},
		{Name: "c", Cluster: "cb", Parameter: "/golden/c", Min: 1, Max: 2, Desired: 1},
	}})
	require.NoError(t, err)
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Equal(t, []string{"a", "b", "c"}, obs.take())

	wake := func(wk events.WakeUp) events.Event {
		return events.Event{Kind: events.KindWakeUp, Envelope: events.EnvelopeEventBridge, ID: "e", Group: wk.Group, Wake: &wk}
	}
	for _, tc := range []struct {
		name   string
		ev     events.Event
		want   []string
		ignore bool // names no managed target: Ignored, so the ignored-messages metric shows it
	}{
		{"a launch result wakes its group", wake(events.WakeUp{Group: "a", InstanceID: "i-1", Status: "InProgress"}), []string{"a"}, false},
		{"a container instance change wakes the ECS groups of its cluster", wake(events.WakeUp{Cluster: "cb", InstanceID: "i-2", Status: "DRAINING"}), []string{"b", "c"}, false},
		{"an EC2 instance state change wakes the group that listed the instance", wake(events.WakeUp{InstanceID: instanceOf(t, w, "c"), Status: "shutting-down"}), []string{"c"}, false},
		{"an instance no managed group listed wakes nothing", wake(events.WakeUp{InstanceID: "i-0ffffffffffffffff", Status: "terminated"}), nil, true},
		{"a group the agent does not manage wakes nothing", wake(events.WakeUp{Group: "someone-elses"}), nil, true},
		{"a cluster of no managed group wakes nothing", wake(events.WakeUp{Cluster: "other"}), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.Account.ResetCalls()
			disp, err := w.Agent.Handle(ctx, tc.ev)
			require.NoError(t, err)
			want := events.Done
			if tc.ignore {
				want = events.Ignored
			}
			require.Equal(t, want, disp)
			require.Empty(t, w.Account.Calls(), "handling the event itself reads and changes nothing in AWS")
			w.Agent.ReconcileWoken(ctx)
			require.Equal(t, tc.want, obs.take())
			w.Agent.ReconcileWoken(ctx)
			require.Empty(t, obs.take(), "one event, one look")
		})
	}
	for _, tc := range []struct {
		name  string
		ev    events.Event
		want  events.Disposition
		looks []string
	}{
		{"a container instance DRAINING with tasks left makes no look", wake(events.WakeUp{Cluster: "cb", InstanceID: "i-2", Status: "DRAINING", TasksLeft: aws.Int32(2)}), events.Ignored, nil},
		{"a container instance DRAINING with its last task stopped makes a look", wake(events.WakeUp{Cluster: "cb", InstanceID: "i-2", Status: "DRAINING", TasksLeft: aws.Int32(0)}), events.Done, []string{"b", "c"}},
		{"a container instance ACTIVE with tasks makes a look", wake(events.WakeUp{Cluster: "cb", InstanceID: "i-2", Status: "ACTIVE", TasksLeft: aws.Int32(2)}), events.Done, []string{"b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disp, err := w.Agent.Handle(ctx, tc.ev)
			require.NoError(t, err)
			require.Equal(t, tc.want, disp)
			w.Agent.ReconcileWoken(ctx)
			require.Equal(t, tc.looks, obs.take())
		})
	}
	disp, err := w.Agent.Handle(ctx, events.Event{Kind: events.KindWakeUp, Wake: &events.WakeUp{}})
	require.NoError(t, err)
	require.Equal(t, events.Ignored, disp, "a wake-up naming nothing is ignored")
}

// instanceOf returns the id of an instance of group in w's account.
func instanceOf(t *testing.T, w *testworld.World, group string) string {
	t.Helper()
	g := w.Account.Group(group)
	require.NotEmpty(t, g.Instances)
	return g.Instances[0].ID
}
