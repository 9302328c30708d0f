package notify

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/state"
)

// FanOut passes every observation to each of Observers in order (the metrics Registry and the Notifier), so
// the agent takes one lifecycle.Observer. A panicking observer is logged and skipped: observers must never
// fail the agent's work.
type FanOut struct {
	Observers []lifecycle.Observer
	// Log receives observer panics; nil discards them.
	Log *zap.Logger
}

var _ lifecycle.Observer = FanOut{}

// RolloutTransition implements lifecycle.Observer.
func (f FanOut) RolloutTransition(prev, next state.Rollout, what string) {
	for _, o := range f.Observers {
		f.call("RolloutTransition", func() { o.RolloutTransition(prev, next, what) })
	}
}

// TargetObserved implements lifecycle.Observer.
func (f FanOut) TargetObserved(t lifecycle.Target, v lifecycle.GroupView, r state.Rollout, ami *lifecycle.ResolvedAMI) {
	for _, o := range f.Observers {
		f.call("TargetObserved", func() { o.TargetObserved(t, v, r, ami) })
	}
}

// LifecycleActionCompleted implements lifecycle.Observer.
func (f FanOut) LifecycleActionCompleted(h state.Hook, drain time.Duration) {
	for _, o := range f.Observers {
		f.call("LifecycleActionCompleted", func() { o.LifecycleActionCompleted(h, drain) })
	}
}

// LifecycleMessageRejected implements lifecycle.Observer.
func (f FanOut) LifecycleMessageRejected(r lifecycle.Rejection) {
	for _, o := range f.Observers {
		f.call("LifecycleMessageRejected", func() { o.LifecycleMessageRejected(r) })
	}
}

// AMIRejected implements lifecycle.AMIRejectionObserver: it is passed to the observers that implement it.
func (f FanOut) AMIRejected(t lifecycle.Target, r state.Rollout, rej lifecycle.AMIRejection) {
	for _, o := range f.Observers {
		if ro, ok := o.(lifecycle.AMIRejectionObserver); ok {
			f.call("AMIRejected", func() { ro.AMIRejected(t, r, rej) })
		}
	}
}

var _ lifecycle.AMIRejectionObserver = FanOut{}

// Alert implements lifecycle.AlertObserver: it is passed to the observers that implement it.
func (f FanOut) Alert(a lifecycle.Alert) {
	for _, o := range f.Observers {
		if ao, ok := o.(lifecycle.AlertObserver); ok {
			f.call("Alert", func() { ao.Alert(a) })
		}
	}
}

var _ lifecycle.AlertObserver = FanOut{}

func (f FanOut) call(what string, fn func()) {
	defer func() {
		if p := recover(); p != nil && f.Log != nil {
			f.Log.Error("observer panicked; skipped", zap.String("observer_call", what), zap.String("panic", fmt.Sprint(p)))
		}
	}()
	fn()
}
