package model

import (
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// Observer is told what the agent does, for metrics and notifications. Implementations must be fast and must
// not fail the work: they are called inline, after the effect is durable.
type Observer interface {
	// RolloutTransition is called after every rollout transition was written: prev is the record before it.
	RolloutTransition(prev, next state.Rollout, what string)
	// TargetObserved is called once per target and reconcile tick, after the rollout step, with what the tick
	// saw: the group's instances and the AMI its source names (nil when unknown).
	TargetObserved(t Target, v GroupView, r state.Rollout, ami *ResolvedAMI)
	// LifecycleActionCompleted is called when the agent completed a lifecycle action (or found it no longer
	// active); drain is how long the drain took (0 for launching actions).
	LifecycleActionCompleted(h state.Hook, drain time.Duration)
	// LifecycleMessageRejected is called when a lifecycle message was deleted unconfirmed: Auto Scaling did
	// not confirm the action it claims (field case C19), or it names a group the agent does not manage.
	LifecycleMessageRejected(r Rejection)
}

// NopObserver observes nothing.
type NopObserver struct{}

func (NopObserver) RolloutTransition(state.Rollout, state.Rollout, string)        {}
func (NopObserver) TargetObserved(Target, GroupView, state.Rollout, *ResolvedAMI) {}
func (NopObserver) LifecycleActionCompleted(state.Hook, time.Duration)            {}
func (NopObserver) LifecycleMessageRejected(Rejection)                            {}

var _ Observer = NopObserver{}

// AMIRejectionObserver is implemented by observers that also count and announce refusals of the AMI gate
// (metrics, notifications). It is apart from Observer so that observers without interest need no method.
// AMIRejected is called once per distinct refusal of a rollout's target AMI, after the refusal was written to
// the rollout record (r).
type AMIRejectionObserver interface {
	AMIRejected(t Target, r state.Rollout, rej AMIRejection)
}
