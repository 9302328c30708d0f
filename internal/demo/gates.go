package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// DemoAlarm is the CloudWatch alarm the alarm-gate scenario's groups name in patch-agent/alarms.
const DemoAlarm = "demo-web-5xx"

// gateHold is how long the operator (approval) or the alarm (alarm-gate) holds the rollouts, in simulated
// time, after the new AMI is detected.
const gateHold = 20 * time.Minute

func init() {
	scenarios["approval"] = scenario{name: "approval", expect: state.PhaseCompleted,
		description: "the groups are tagged patch-agent/approval=manual: the new AMI waits until the operator approves it, 20 minutes later",
		setup:       withTag(model.TagApproval, "manual"),
		during:      approveAfterHold}
	scenarios["alarm-gate"] = scenario{name: "alarm-gate", expect: state.PhaseCompleted,
		description: "the groups name CloudWatch alarm " + DemoAlarm + " in patch-agent/alarms; it is in ALARM when the AMI arrives and holds the rollouts until it returns to OK 20 minutes later",
		setup:       withTag(model.TagAlarms, DemoAlarm),
		prepare:     func(w *testworld.World) { w.Account.SetAlarm(DemoAlarm, "ALARM") },
		during:      clearAlarmAfterHold}
}

// approveAfterHold approves each group's target AMI (operator.Approve, as `patch-agent approve GROUP` does)
// once it has waited for approval for gateHold.
func approveAfterHold(ctx context.Context, w *testworld.World, p *printer) error {
	now := w.Account.Clock().Now()
	for _, group := range w.GroupNames() {
		r, err := w.Store.GetRollout(ctx, group)
		if err != nil || !operator.WaitingForApproval(r) || now.Sub(r.DetectedAt) < gateHold {
			continue
		}
		p.linef("operator: patch-agent approve %s   (%s waited %s for approval of %s)", group, group, now.Sub(r.DetectedAt).Round(time.Second), r.TargetImageID)
		if _, err := operator.Approve(ctx, w.Store, group, "", "operator", false, now); err != nil {
			return fmt.Errorf("approving %s: %w", group, err)
		}
	}
	return nil
}

// clearAlarmAfterHold sets the alarm back to OK once a group has been held by it for gateHold.
func clearAlarmAfterHold(ctx context.Context, w *testworld.World, p *printer) error {
	if p.alarmCleared {
		return nil
	}
	now := w.Account.Clock().Now()
	for _, group := range w.GroupNames() {
		r, err := w.Store.GetRollout(ctx, group)
		if err != nil || r.TargetImageID != testworld.ImageB || r.DetectedAt.IsZero() || now.Sub(r.DetectedAt) < gateHold {
			continue
		}
		p.alarmCleared = true
		p.linef("CloudWatch: alarm %s returns to OK (it held %s: %s)", DemoAlarm, group, r.Reason)
		w.Account.SetAlarm(DemoAlarm, "OK")
		return nil
	}
	return nil
}
