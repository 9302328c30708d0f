package notify

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// FanOut passes every observation to each of Observers in order (the metrics Registry and the Notifier), so
// the agent takes one model.Observer. A panicking observer is logged and skipped: observers must never
// fail the agent's work.
type FanOut struct {
	Observers []model.Observer
	// Log receives observer panics; nil discards them.
	Log *zap.Logger
}

var _ model.Observer = FanOut{}

// RolloutTransition implements model.Observer.
func (f FanOut) RolloutTransition(prev, next state.Rollout, what string) {
	for _, o := range f.Observers {
		f.call("RolloutTransition", func() { o.RolloutTransition(prev, next, what) })
	}
}

// TargetObserved implements model.Observer.
func (f FanOut) TargetObserved(t model.Target, v model.GroupView, r state.Rollout, ami *model.ResolvedAMI) {
	for _, o := range f.Observers {
		f.call("TargetObserved", func() { o.TargetObserved(t, v, r, ami) })
	}
}

// LifecycleActionCompleted implements model.Observer.
func (f FanOut) LifecycleActionCompleted(h state.Hook, drain time.Duration) {
	for _, o := range f.Observers {
		f.call("LifecycleActionCompleted", func() { o.LifecycleActionCompleted(h, drain) })
	}
}

// LifecycleMessageRejected implements model.Observer.
func (f FanOut) LifecycleMessageRejected(r model.Rejection) {
	for _, o := range f.Observers {
		f.call("LifecycleMessageRejected", func() { o.LifecycleMessageRejected(r) })
	}
}

// AMIRejected implements model.AMIRejectionObserver: it is passed to the observers that implement it.
func (f FanOut) AMIRejected(t model.Target, r state.Rollout, rej model.AMIRejection) {
	for _, o := range f.Observers {
		if ro, ok := o.(model.AMIRejectionObserver); ok {
			f.call("AMIRejected", func() { ro.AMIRejected(t, r, rej) })
		}
	}
}

var _ model.AMIRejectionObserver = FanOut{}

// Alert implements model.AlertObserver: it is passed to the observers that implement it.
func (f FanOut) Alert(a model.Alert) {
	for _, o := range f.Observers {
		if ao, ok := o.(model.AlertObserver); ok {
			f.call("Alert", func() { ao.Alert(a) })
		}
	}
}

var _ model.AlertObserver = FanOut{}

func (f FanOut) call(what string, fn func()) {
	defer func() {
		if p := recover(); p != nil && f.Log != nil {
			f.Log.Error("observer panicked; skipped", zap.String("observer_call", what), zap.String("panic", fmt.Sprint(p)))
		}
	}()
	fn()
}
