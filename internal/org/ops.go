package org

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Session is one target reached through its operator role: the audit's read-only clients (their SSM client
// also reads the stack's Deployment), the agent's store and its queue.
type Session struct {
	Audit audit.Clients
	// Store returns the agent's store of table.
	Store func(table string) state.Store
	// Queue sends operator wake-ups.
	Queue awsapi.OperatorQueue
	// Clock dates the audit (nil: the real clock).
	Clock clock.PassiveClock
}

// Connector reaches a target: the AWS one assumes the operator role in the account (STS AssumeRole), a
// simulated one hands out simulated accounts. An error is the target's result (the role cannot be assumed).
type Connector interface {
	Connect(ctx context.Context, t Target) (*Session, error)
}

// ConnectorFunc adapts a function to Connector.
type ConnectorFunc func(ctx context.Context, t Target) (*Session, error)

// Connect calls f.
func (f ConnectorFunc) Connect(ctx context.Context, t Target) (*Session, error) { return f(ctx, t) }

// Audit audits every target (audit.Auditor): one report per target.
func Audit(ctx context.Context, r Runner, c Connector, targets []Target) []Result[*audit.Report] {
	return Run(ctx, r, targets, func(ctx context.Context, t Target) (*audit.Report, error) {
		s, err := c.Connect(ctx, t)
		if err != nil {
			return nil, err
		}
		return (&audit.Auditor{Clients: s.Audit, Region: t.Region, Clock: s.Clock}).Run(ctx)
	})
}

// open connects to t and opens the agent's store found through the stack's parameter.
func open(ctx context.Context, c Connector, t Target, deployment string) (*Session, Deployment, state.Store, error) {
	s, err := c.Connect(ctx, t)
	if err != nil {
		return nil, Deployment{}, nil, err
	}
	d, err := Locate(ctx, s.Audit.SSM, deployment)
	if err != nil {
		return nil, Deployment{}, nil, err
	}
	return s, d, s.Store(d.Table), nil
}

// Status filters (StatusFilter).
const (
	OnlyWaiting = "waiting" // a gate holds the rollout (soak, window, approval, alarm), no pause
	OnlyHolding = "holding" // a pause holds the group
	OnlyHalted  = "halted"  // Halted, RollingBack or RolledBack
)

// StatusFilters lists the values of StatusFilter.
func StatusFilters() []string { return []string{OnlyWaiting, OnlyHolding, OnlyHalted} }

// Matches says whether row is of one of the kinds in only (none: every row).
func Matches(row operator.StatusRow, only []string) bool {
	if len(only) == 0 {
		return true
	}
	for _, o := range only {
		switch {
		case o == OnlyHolding && row.Paused != nil,
			o == OnlyWaiting && row.Paused == nil && row.Phase == state.PhaseWaiting,
			o == OnlyHalted && (row.Phase == state.PhaseHalted || row.Phase == state.PhaseRollingBack || row.Phase == state.PhaseRolledBack):
			return true
		}
	}
	return false
}

// Status reads every target's status rows (operator.Status), keeping those Matches only, at now.
func Status(ctx context.Context, r Runner, c Connector, targets []Target, deployment string, only []string, now time.Time) []Result[[]operator.StatusRow] {
	return Run(ctx, r, targets, func(ctx context.Context, t Target) ([]operator.StatusRow, error) {
		_, _, store, err := open(ctx, c, t, deployment)
		if err != nil {
			return nil, err
		}
		rows, err := operator.Status(ctx, store, "", now)
		if err != nil {
			return nil, err
		}
		kept := rows[:0]
		for _, row := range rows {
			if Matches(row, only) {
				kept = append(kept, row)
			}
		}
		return kept, nil
	})
}

// Outcomes of Pause and Resume in one target.
const (
	Paused        = "paused"         // this run wrote the global pause
	Replaced      = "replaced"       // this run replaced a global pause in place (--replace)
	AlreadyPaused = "already-paused" // a global pause lasting at least as long as the one asked for was in place: left as it is
	PausedUntil   = "paused-until"   // a global pause ending before the one asked for was in place: left as it is, the run fails
	Resumed       = "resumed"        // this run lifted the global pause
	NotPaused     = "not-paused"     // there was no global pause to lift
)

// Refused says whether outcome leaves a target short of what was asked (PausedUntil): the command fails.
func Refused(outcome string) bool { return outcome == PausedUntil }

// Change is what Pause or Resume did in one target: the outcome, the pause it met or lifted, and whether the
// agent was woken (a failed wake-up is only a warning: the table write is the effect).
type Change struct {
	Outcome string `json:"outcome"`
	Detail  string `json:"detail"`
	Woken   bool   `json:"woken"`
	Warning string `json:"warning"`
}

// PauseRequest is the global pause Pause writes in every target.
type PauseRequest struct {
	Reason, Who string
	Until       time.Time
	// Replace replaces a global pause already in place; without it such a pause is left as it is.
	Replace bool
}

// Pause writes the global pause in every target with one conditional write (operator.PauseIfAbsent), so a
// pause another operator wrote meanwhile is never overwritten and a pause lifted a moment before is never
// taken for one in place. A pause in place is left as it is unless Replace: AlreadyPaused when it lasts at
// least as long as the one asked for (no end, or an end not before Until), PausedUntil when it ends earlier
// or the one asked for has no end, as the one-account pause refuses it: the target would resume before the
// operator meant it to. Running it again after a partial failure pauses the targets that failed and leaves
// the others: it is safe to repeat. Each write is confirmed by the table's answer before the target counts
// as paused; then the agent is woken.
func Pause(ctx context.Context, r Runner, c Connector, targets []Target, deployment string, p PauseRequest, now func() time.Time) []Result[Change] {
	return Run(ctx, r, targets, func(ctx context.Context, t Target) (Change, error) {
		s, d, store, err := open(ctx, c, t, deployment)
		if err != nil {
			return Change{}, err
		}
		outcome := Paused
		held, written, err := operator.PauseIfAbsent(ctx, store, state.GlobalScope, p.Reason, p.Who, p.Until, now())
		switch {
		case err != nil:
			return Change{}, err
		case !written && p.Replace:
			if err := operator.Pause(ctx, store, state.GlobalScope, p.Reason, p.Who, p.Until, now()); err != nil {
				return Change{}, err
			}
			outcome = Replaced
		case !written && !held.Until.IsZero() && (p.Until.IsZero() || held.Until.Before(p.Until)):
			return Change{Outcome: PausedUntil, Detail: fmt.Sprintf("paused-until %s (%s): run with --replace to extend",
				held.Until.UTC().Format(time.RFC3339), describe(held))}, nil
		case !written:
			return Change{Outcome: AlreadyPaused, Detail: "already paused globally: " + describe(held)}, nil
		}
		ch := Change{Outcome: outcome, Detail: "paused globally by " + p.Who + ": " + strings.TrimSpace(p.Reason)}
		wake(ctx, s, d, t, &ch, events.OperatorWakeUp{Action: events.OperatorPause, Scope: events.OperatorGlobal, Who: p.Who}, now())
		return ch, nil
	})
}

// describe names a pause in place: who, since, until and why, as far as the table gave them.
func describe(l state.Lock) string {
	end := "until resumed"
	if !l.Until.IsZero() {
		end = "until " + l.Until.UTC().Format(time.RFC3339)
	}
	since := "unknown"
	if !l.Since.IsZero() {
		since = l.Since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("by %s since %s %s: %s", orUnknown(l.Who), since, end, orUnknown(l.Reason))
}

// Resume lifts the global pause in every target (operator.Resume); a target without one is NotPaused, so
// running it again after a partial failure is safe. Group pauses are left as they are. who is the operator,
// named in each target's detail and wake-up as Pause names p.Who.
func Resume(ctx context.Context, r Runner, c Connector, targets []Target, deployment, who string, now func() time.Time) []Result[Change] {
	return Run(ctx, r, targets, func(ctx context.Context, t Target) (Change, error) {
		s, d, store, err := open(ctx, c, t, deployment)
		if err != nil {
			return Change{}, err
		}
		lifted, err := operator.Resume(ctx, store, state.GlobalScope, now())
		if errors.Is(err, operator.ErrNotPaused) {
			return Change{Outcome: NotPaused, Detail: err.Error()}, nil
		}
		if err != nil {
			return Change{}, err
		}
		ch := Change{Outcome: Resumed, Detail: fmt.Sprintf("%s lifted the pause of %s since %s: %s", orUnknown(who), orUnknown(lifted.Who),
			lifted.Since.UTC().Format(time.RFC3339), orUnknown(lifted.Reason))}
		wake(ctx, s, d, t, &ch, events.OperatorWakeUp{Action: events.OperatorResume, Scope: events.OperatorGlobal, Who: who}, now())
		return ch, nil
	})
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "unknown"
	}
	return s
}

// wake sends o to the deployment's wake-up queue; a failure is ch's warning.
func wake(ctx context.Context, s *Session, d Deployment, t Target, ch *Change, o events.OperatorWakeUp, now time.Time) {
	q := d.WakeQueue()
	if q == "" || s.Queue == nil {
		ch.Warning = "not woken (the stack names no queue): the agent acts at its next safety poll"
		return
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	body, err := events.NewOperatorWakeUp(o, hex.EncodeToString(id), t.Region, t.ID, now)
	if err == nil {
		_, err = s.Queue.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String(string(body))})
	}
	if err != nil {
		ch.Warning = fmt.Sprintf("recorded, but waking the agent failed (%v): it acts at its next safety poll", err)
		return
	}
	ch.Woken = true
}
