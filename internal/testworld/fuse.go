package testworld

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/state"
)

// ErrCrashed is what every call of a crashed agent incarnation returns: the process is gone, nothing it
// would still do reaches the world.
var ErrCrashed = errors.New("agent process crashed (simulated)")

// ErrResponseLost is what the call of a Fuse's effect At returns with LoseResponse: the effect took place, its
// answer never reached the agent (a connection reset after the request was served), and the process then dies.
var ErrResponseLost = errors.New("response lost, then agent process crashed (simulated)")

// Fuse counts the effects one agent incarnation has on the world — store writes (rollout and lifecycle action
// records, history, event markers, drain marks), mutating AWS calls and the drain steps of the EKS platform —
// and kills the incarnation right after the effect numbered At took place: that effect is
// durable, every later call fails with ErrCrashed. At 0 never fires.
type Fuse struct {
	mu      sync.Mutex
	At      int
	effects int
	blown   bool
	// OnWrite, when set, is asked after every successful rollout write whether to blow now.
	OnWrite func(state.Rollout) bool
	// OnHook, when set, is asked after every successful lifecycle action record write whether to blow now.
	OnHook func(state.Hook) bool
	// LoseResponse makes effect At "applied, response lost": the effect is durable, but the incarnation gets
	// ErrResponseLost instead of its answer, and dies before it can do anything after it.
	LoseResponse bool
	// Concurrent leaves the incarnations handling messages several at once, as in production
	// (events.Consumer.Concurrency); otherwise they handle one at a time, so that a run's effects come in the
	// same order every time and effect At is the same effect in every run.
	Concurrent bool
}

// Blown reports whether the fuse has fired.
func (f *Fuse) Blown() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blown
}

// Effects reports how many effects went through.
func (f *Fuse) Effects() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.effects
}

// before fails the call of a dead incarnation.
func (f *Fuse) before() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blown {
		return ErrCrashed
	}
	return nil
}

// after counts a completed effect and blows the fuse when it was the chosen one. It returns the error the
// incarnation sees: err, or ErrResponseLost for the chosen effect when LoseResponse is set.
func (f *Fuse) after(err error) error {
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.effects++
	if f.At > 0 && f.effects == f.At {
		f.blown = true
		if f.LoseResponse {
			return ErrResponseLost
		}
	}
	return nil
}

func (f *Fuse) blow() {
	f.mu.Lock()
	f.blown = true
	f.mu.Unlock()
}

// Blow kills the incarnation now: a test's wrapper of the world's clients (Spec.Wrap) calls it right after a
// call of its choosing took effect (an ECS drain, say), and every later call of the incarnation fails.
func (f *Fuse) Blow() { f.blow() }

// fuseKind is what a call of a fused client is to the Fuse.
type fuseKind int

const (
	// fusePass calls go through untouched, even once the fuse blew.
	fusePass fuseKind = iota
	// fuseRead calls fail with ErrCrashed once the fuse blew; they are no effect.
	fuseRead
	// fuseWrite calls are effects: they fail with ErrCrashed once the fuse blew, and one that succeeds is
	// counted (Fuse.after) and may blow the fuse.
	fuseWrite
)

// fuseKinds says what every call of the fused store, clients and platform (fuse_gen.go) is, by operation:
// "service:Operation" for AWS calls, "state:Operation" for the store, "model:Operation" for the platform.
// The conditional writes of the store count as effects: MarkEvent (the first delivery of an event id wins)
// and PutClusterBudget (a drain slot claimed). UpdateNodegroupVersion is the one mutating call of a managed
// node group rollout; every drain step of a platform is an effect.
var fuseKinds = map[string]fuseKind{
	"state:GetRollout": fuseRead, "state:PutRollout": fuseWrite, "state:PutRolloutWithHistory": fuseWrite,
	"state:PutRolloutUnlessPaused": fuseWrite, "state:PauseHolding": fusePass, "state:ListRollouts": fusePass,
	"state:GetHook": fuseRead, "state:PutHook": fuseWrite,
	"state:AppendHistory": fuseWrite, "state:History": fusePass,
	"state:PutLock": fusePass, "state:PutLockIfAbsent": fusePass, "state:DeleteLock": fusePass,
	"state:LiftLock": fusePass, "state:ListLocks": fusePass,
	"state:MarkEvent": fuseWrite, "state:EventSeen": fusePass,
	"state:PutDrainMark": fuseWrite, "state:DeleteDrainMark": fuseWrite, "state:ListDrainMarks": fuseRead,
	"state:GetClusterBudget": fuseRead, "state:PutClusterBudget": fuseWrite,

	"autoscaling:DescribeAutoScalingGroups": fuseRead, "autoscaling:DescribeLifecycleHooks": fusePass,
	"autoscaling:CompleteLifecycleAction": fuseWrite, "autoscaling:RecordLifecycleActionHeartbeat": fuseWrite,
	"autoscaling:DescribeAutoScalingInstances": fusePass, "autoscaling:DescribeWarmPool": fusePass,
	"autoscaling:StartInstanceRefresh": fuseWrite, "autoscaling:DescribeInstanceRefreshes": fusePass,
	"autoscaling:CancelInstanceRefresh": fuseWrite, "autoscaling:RollbackInstanceRefresh": fuseWrite,

	"ec2:DescribeLaunchTemplateVersions": fusePass, "ec2:CreateLaunchTemplateVersion": fuseWrite,
	"ec2:DescribeInstances": fusePass, "ec2:DescribeImages": fusePass,

	"ecs:ListContainerInstances": fusePass, "ecs:DescribeContainerInstances": fusePass,
	"ecs:UpdateContainerInstancesState": fuseWrite, "ecs:ListTasks": fusePass, "ecs:DescribeTasks": fusePass,
	"ecs:DescribeServices": fusePass,

	"sqs:ReceiveMessage": fuseRead, "sqs:DeleteMessage": fuseWrite, "sqs:DeleteMessageBatch": fuseWrite,
	"sqs:ChangeMessageVisibility": fuseWrite,

	"eks:ListClusters": fusePass, "eks:ListNodegroups": fusePass, "eks:DescribeNodegroup": fusePass,
	"eks:DescribeCluster": fusePass, "eks:UpdateNodegroupVersion": fuseWrite, "eks:DescribeUpdate": fuseRead,

	"model:Observe": fuseRead, "model:StartDrain": fuseWrite, "model:DrainStatus": fuseWrite,
	"model:Undrain": fuseWrite,
}

// The wrappers of fuse_gen.go send every call of the store, the fused AWS clients and the platform through
// fused.
//go:generate go run ../../tools/wrapgen -o fuse_gen.go -call fused -with *Fuse -prefix fused ../state Store ../model Platform ../awsapi AutoScaling EC2 ECS SQS EKSNodegroups

// fused runs one call op of a fused client as fuseKinds says. A read or write of a dead incarnation fails
// with ErrCrashed; a write that succeeds is an effect (after), and the rollout or lifecycle action record it
// wrote is shown to OnWrite or OnHook, which may blow the fuse.
func fused[T any](ctx context.Context, f *Fuse, op string, do func(context.Context) (T, error)) (T, error) {
	var zero T
	kind := fuseKinds[op]
	if kind == fusePass {
		return do(ctx)
	}
	if err := f.before(); err != nil {
		return zero, err
	}
	if kind == fuseRead {
		return do(ctx)
	}
	out, err := do(ctx)
	if err = f.after(err); err != nil {
		return zero, err
	}
	switch v := any(out).(type) {
	case state.Rollout:
		if f.OnWrite != nil && f.OnWrite(v) {
			f.blow()
		}
	case state.Hook:
		if f.OnHook != nil && f.OnHook(v) {
			f.blow()
		}
	}
	return out, nil
}

// fused0 is fused for a call that returns only an error.
func fused0(ctx context.Context, f *Fuse, op string, do func(context.Context) error) error {
	_, err := fused(ctx, f, op, func(ctx context.Context) (struct{}, error) { return struct{}{}, do(ctx) })
	return err
}

// fused2 is fused for a call that returns two values and an error.
func fused2[T, U any](ctx context.Context, f *Fuse, op string, do func(context.Context) (T, U, error)) (T, U, error) {
	type pair struct {
		t T
		u U
	}
	p, err := fused(ctx, f, op, func(ctx context.Context) (pair, error) {
		t, u, err := do(ctx)
		return pair{t, u}, err
	})
	return p.t, p.u, err
}

// Wrap gives an incarnation's clients and store the fuse.
func (f *Fuse) Wrap(c agent.Clients, s state.Store) (agent.Clients, state.Store) {
	out := agent.Clients{
		AutoScaling: fusedAutoScaling{c.AutoScaling, f}, EC2: fusedEC2{c.EC2, f}, ECS: fusedECS{c.ECS, f},
		SSM: c.SSM, SQS: fusedSQS{c.SQS, f}, CloudWatch: c.CloudWatch, InstanceTypes: c.InstanceTypes,
	}
	if c.EKSNodegroups != nil {
		out.EKSNodegroups = fusedEKSNodegroups{c.EKSNodegroups, f} // fuse_gen.go
	}
	return out, fusedStore{s, f}
}

// Restart replaces the world's agent with a fresh incarnation on the same store, queue and account: every
// in-memory state of the old one (held messages, caches, discovered targets) is gone. fuse, when not nil,
// arms the new incarnation.
func (w *World) Restart(fuse *Fuse) {
	w.ReplaceAgent(fuse)
	w.Restarts++
}

// replaceAgent starts a fresh agent incarnation, keeping the message counts of the one it replaces.
func (w *World) ReplaceAgent(fuse *Fuse) {
	clients, store := w.Clients, w.Store
	if fuse != nil {
		clients, store = fuse.Wrap(clients, store)
	}
	if w.Agent != nil {
		for _, c := range w.Agent.Consumers() {
			w.pastMessages.Processed += c.Stats.Processed.Load()
			w.pastMessages.Ignored += c.Stats.Ignored.Load()
			w.pastMessages.Failed += c.Stats.Failed.Load()
		}
	}
	w.Agent = agent.New(clients, w.agentSettings(fuse), store, w.Account.Clock(), w.log)
	w.fuse = fuse
	if fuse != nil && !fuse.Concurrent {
		w.oneAtATime = true // the crash matrix numbers the effects of a run that must be the same every time
	}
	w.oneMessageAtATime()
}

// settleAfter is how long the crash scenarios let the world run after a rollout ends so that the last
// lifecycle actions and messages settle.
const settleAfter = time.Minute
