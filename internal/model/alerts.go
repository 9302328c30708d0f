package model

import (
	"time"
)

// Alert kinds: the Reason dimension of the Alerts metric and, in kebab case, the event of the "Rollout State
// Change" notification (internal/notify). A short, fixed set: nothing a message claims makes a new series.
const (
	// AlertSourceMissing: the target's AMI source stopped naming a usable AMI (the SSM parameter was deleted,
	// does not exist or holds no AMI id). Nothing new rolls until it does again. Once per transition.
	AlertSourceMissing = "SourceMissing"
	// AlertSourceRestored: a source that was missing names an AMI again. Once per transition.
	AlertSourceRestored = "SourceRestored"
	// AlertDrainDeadline: a terminating lifecycle action reached its drain deadline undrained and the agent
	// continued it (Auto Scaling would have ended it at the hook's global timeout anyway).
	AlertDrainDeadline = "DrainDeadline"
	// AlertDrainTimeoutCapped: --drain-timeout is longer than a managed hook's global timeout; the hook's
	// drains are cut at the hook's limit instead. Once per group and distinct note.
	AlertDrainTimeoutCapped = "DrainTimeoutCapped"
	// AlertSoakSkipped: an operator approved the target AMI with --skip-soak (who: the STS caller ARN).
	AlertSoakSkipped = "SoakSkipped"
	// AlertMisconfigured: an opted-in group has a tag the agent does not accept (a batch size of 0, an unknown
	// strategy, a window it cannot read): it is left alone, and has no status line. Once per group and distinct
	// error.
	AlertMisconfigured = "Misconfigured"
)

// Alert is something an operator should hear about that is not a rollout transition by itself.
type Alert struct {
	// Kind is one of the Alert* constants.
	Kind string
	// Target is the group the alert is about.
	Target Target
	// Detail says what happened in an operator's words (also the status note, when there is one).
	Detail string
	// Who is the identity that caused it, when a person did (the STS caller ARN of `patch-agent approve`).
	Who string
	// ImageID is the AMI concerned, when there is one.
	ImageID string
	// At is when the agent noticed.
	At time.Time
}

// AlertObserver is implemented by observers that count and announce alerts (the metrics Registry, the
// Notifier). It is apart from Observer so that observers without interest need no method. Implementations
// must be fast and must not fail the work.
type AlertObserver interface {
	Alert(a Alert)
}

// SendAlert tells o about a when o is an AlertObserver (nil and other observers ignore it).
func SendAlert(o Observer, a Alert) {
	if ao, ok := o.(AlertObserver); ok {
		ao.Alert(a)
	}
}

// AlertSetBack: an outside change pointed the group's launch template back at another AMI after the agent rolled
// it to its target (internal/engine, setback.go). Once per set-back; Who is the version's CreatedBy, ImageID the AMI it set back to.
const AlertSetBack = "SetBack"
