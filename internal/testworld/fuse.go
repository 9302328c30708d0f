package testworld

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
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

// Wrap gives an incarnation's clients and store the fuse.
func (f *Fuse) Wrap(c agent.Clients, s state.Store) (agent.Clients, state.Store) {
	out := agent.Clients{
		AutoScaling: fusedASG{c.AutoScaling, f}, EC2: fusedEC2{c.EC2, f}, ECS: fusedECS{c.ECS, f},
		SSM: c.SSM, SQS: fusedSQS{c.SQS, f}, CloudWatch: c.CloudWatch, InstanceTypes: c.InstanceTypes,
	}
	if c.EKSNodegroups != nil {
		out.EKSNodegroups = fusedEKSNodegroups{c.EKSNodegroups, f} // crash_nodegroups.go
	}
	return out, fusedStore{s, f}
}

type fusedStore struct {
	state.Store
	f *Fuse
}

func (s fusedStore) GetRollout(ctx context.Context, g string) (state.Rollout, error) {
	if err := s.f.before(); err != nil {
		return state.Rollout{}, err
	}
	return s.Store.GetRollout(ctx, g)
}

func (s fusedStore) PutRollout(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	if err := s.f.before(); err != nil {
		return state.Rollout{}, err
	}
	out, err := s.Store.PutRollout(ctx, r)
	if err = s.f.after(err); err != nil {
		return state.Rollout{}, err
	}
	if s.f.OnWrite != nil && s.f.OnWrite(out) {
		s.f.blow()
	}
	return out, err
}

func (s fusedStore) PutRolloutWithHistory(ctx context.Context, r state.Rollout, h []state.HistoryEntry) (state.Rollout, error) {
	if err := s.f.before(); err != nil {
		return state.Rollout{}, err
	}
	out, err := s.Store.PutRolloutWithHistory(ctx, r, h)
	if err = s.f.after(err); err != nil {
		return state.Rollout{}, err
	}
	if s.f.OnWrite != nil && s.f.OnWrite(out) {
		s.f.blow()
	}
	return out, err
}

func (s fusedStore) PutRolloutUnlessPaused(ctx context.Context, r state.Rollout, h []state.HistoryEntry, now time.Time, claim *state.ClusterBudget) (state.Rollout, error) {
	if err := s.f.before(); err != nil {
		return state.Rollout{}, err
	}
	out, err := s.Store.PutRolloutUnlessPaused(ctx, r, h, now, claim)
	if err = s.f.after(err); err != nil {
		return state.Rollout{}, err
	}
	if s.f.OnWrite != nil && s.f.OnWrite(out) {
		s.f.blow()
	}
	return out, err
}

func (s fusedStore) PutHook(ctx context.Context, h state.Hook) (state.Hook, error) {
	if err := s.f.before(); err != nil {
		return state.Hook{}, err
	}
	out, err := s.Store.PutHook(ctx, h)
	if err = s.f.after(err); err != nil {
		return state.Hook{}, err
	}
	if s.f.OnHook != nil && s.f.OnHook(out) {
		s.f.blow()
	}
	return out, nil
}

func (s fusedStore) AppendHistory(ctx context.Context, e state.HistoryEntry) error {
	if err := s.f.before(); err != nil {
		return err
	}
	return s.f.after(s.Store.AppendHistory(ctx, e))
}

func (s fusedStore) GetHook(ctx context.Context, token string) (state.Hook, error) {
	if err := s.f.before(); err != nil {
		return state.Hook{}, err
	}
	return s.Store.GetHook(ctx, token)
}

func (s fusedStore) ListDrainMarks(ctx context.Context) ([]state.DrainMark, error) {
	if err := s.f.before(); err != nil {
		return nil, err
	}
	return s.Store.ListDrainMarks(ctx)
}

// MarkEvent is a conditional write (the first delivery of an event id wins): an effect.
func (s fusedStore) MarkEvent(ctx context.Context, id string, expires time.Time) (bool, error) {
	if err := s.f.before(); err != nil {
		return false, err
	}
	first, err := s.Store.MarkEvent(ctx, id, expires)
	if err = s.f.after(err); err != nil {
		return false, err
	}
	return first, nil
}

func (s fusedStore) PutDrainMark(ctx context.Context, m state.DrainMark) error {
	if err := s.f.before(); err != nil {
		return err
	}
	return s.f.after(s.Store.PutDrainMark(ctx, m))
}

func (s fusedStore) DeleteDrainMark(ctx context.Context, instanceID string) error {
	if err := s.f.before(); err != nil {
		return err
	}
	return s.f.after(s.Store.DeleteDrainMark(ctx, instanceID))
}

type fusedASG struct {
	awsapi.AutoScaling
	f *Fuse
}

func (a fusedASG) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	if err := a.f.before(); err != nil {
		return nil, err
	}
	return a.AutoScaling.DescribeAutoScalingGroups(ctx, in, o...)
}

func (a fusedASG) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, o ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	if err := a.f.before(); err != nil {
		return nil, err
	}
	out, err := a.AutoScaling.CompleteLifecycleAction(ctx, in, o...)
	if err = a.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (a fusedASG) RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, o ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	if err := a.f.before(); err != nil {
		return nil, err
	}
	out, err := a.AutoScaling.RecordLifecycleActionHeartbeat(ctx, in, o...)
	if err = a.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (a fusedASG) StartInstanceRefresh(ctx context.Context, in *autoscaling.StartInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error) {
	if err := a.f.before(); err != nil {
		return nil, err
	}
	out, err := a.AutoScaling.StartInstanceRefresh(ctx, in, o...)
	if err = a.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (a fusedASG) CancelInstanceRefresh(ctx context.Context, in *autoscaling.CancelInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.CancelInstanceRefreshOutput, error) {
	if err := a.f.before(); err != nil {
		return nil, err
	}
	out, err := a.AutoScaling.CancelInstanceRefresh(ctx, in, o...)
	if err = a.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (a fusedASG) RollbackInstanceRefresh(ctx context.Context, in *autoscaling.RollbackInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.RollbackInstanceRefreshOutput, error) {
	if err := a.f.before(); err != nil {
		return nil, err
	}
	out, err := a.AutoScaling.RollbackInstanceRefresh(ctx, in, o...)
	if err = a.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

type fusedEC2 struct {
	awsapi.EC2
	f *Fuse
}

func (e fusedEC2) CreateLaunchTemplateVersion(ctx context.Context, in *ec2.CreateLaunchTemplateVersionInput, o ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	out, err := e.EC2.CreateLaunchTemplateVersion(ctx, in, o...)
	if err = e.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

type fusedECS struct {
	awsapi.ECS
	f *Fuse
}

func (e fusedECS) UpdateContainerInstancesState(ctx context.Context, in *ecs.UpdateContainerInstancesStateInput, o ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	out, err := e.ECS.UpdateContainerInstancesState(ctx, in, o...)
	if err = e.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

type fusedSQS struct {
	awsapi.SQS
	f *Fuse
}

func (q fusedSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if err := q.f.before(); err != nil {
		return nil, err
	}
	return q.SQS.ReceiveMessage(ctx, in, o...)
}

func (q fusedSQS) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	if err := q.f.before(); err != nil {
		return nil, err
	}
	out, err := q.SQS.DeleteMessage(ctx, in, o...)
	if err = q.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (q fusedSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if err := q.f.before(); err != nil {
		return nil, err
	}
	out, err := q.SQS.DeleteMessageBatch(ctx, in, o...)
	if err = q.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (q fusedSQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	if err := q.f.before(); err != nil {
		return nil, err
	}
	out, err := q.SQS.ChangeMessageVisibility(ctx, in, o...)
	if err = q.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
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
}

// settleAfter is how long the crash scenarios let the world run after a rollout ends so that the last
// lifecycle actions and messages settle.
const settleAfter = time.Minute

func (s fusedStore) GetClusterBudget(ctx context.Context, cluster string) (state.ClusterBudget, error) {
	if err := s.f.before(); err != nil {
		return state.ClusterBudget{}, err
	}
	return s.Store.GetClusterBudget(ctx, cluster)
}

// PutClusterBudget is a conditional write (a drain slot claimed): an effect.
func (s fusedStore) PutClusterBudget(ctx context.Context, b state.ClusterBudget) (state.ClusterBudget, error) {
	if err := s.f.before(); err != nil {
		return state.ClusterBudget{}, err
	}
	out, err := s.Store.PutClusterBudget(ctx, b)
	if err = s.f.after(err); err != nil {
		return state.ClusterBudget{}, err
	}
	return out, nil
}

// fusedEKSNodegroups makes UpdateNodegroupVersion an effect of a Fuse (the one mutating call of a managed node
// group rollout); the reads pass, and are refused once the fuse blew.
type fusedEKSNodegroups struct {
	awsapi.EKSNodegroups
	f *Fuse
}

func (e fusedEKSNodegroups) UpdateNodegroupVersion(ctx context.Context, in *awseks.UpdateNodegroupVersionInput, o ...func(*awseks.Options)) (*awseks.UpdateNodegroupVersionOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	out, err := e.EKSNodegroups.UpdateNodegroupVersion(ctx, in, o...)
	if err = e.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (e fusedEKSNodegroups) DescribeUpdate(ctx context.Context, in *awseks.DescribeUpdateInput, o ...func(*awseks.Options)) (*awseks.DescribeUpdateOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	return e.EKSNodegroups.DescribeUpdate(ctx, in, o...)
}
