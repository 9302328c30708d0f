package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/notify"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// alertWorld is a world whose agent reports to a metrics registry and a notifier on the simulated EventBridge,
// so a test can assert both halves of an alert: the Alerts count and the "Patch Agent Alert" event.
type alertWorld struct {
	*testworld.World
	reg      *metrics.Registry
	notifier *notify.Notifier
	g        testworld.GroupSetup
}

// worldEventBridge sends to the world's simulated EventBridge once the world is built (the notifier is the
// world's observer, so it exists first).
type worldEventBridge struct{ w **testworld.World }

func (l worldEventBridge) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, o ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	return (*l.w).Account.EventBridge().PutEvents(ctx, in, o...)
}

func buildAlerting(t *testing.T, spec testworld.Spec, g testworld.GroupSetup) alertWorld {
	t.Helper()
	var w *testworld.World
	reg := metrics.NewRegistry(nil)
	n := notify.New(worldEventBridge{&w}, notify.Options{})
	spec.Observer = notify.FanOut{Observers: []model.Observer{reg, n}}
	w = build(t, spec)
	reg.Clock = w.Account.Clock()
	return alertWorld{World: w, reg: reg, notifier: n, g: g}
}

// alerts returns the Alerts counter of the group and kind (0 when never counted).
func (w alertWorld) alerts(kind string) float64 {
	for _, s := range w.reg.Collect() {
		if s.Name == metrics.Alerts && s.Group == w.g.Name && s.Reason == kind {
			return s.Value
		}
	}
	return 0
}

// notified returns the details of the "Patch Agent Alert" events of the group and kind sent so far.
func (w alertWorld) notified(t *testing.T, kind string) []notify.AlertDetail {
	t.Helper()
	require.NoError(t, w.notifier.Flush(context.Background()))
	var out []notify.AlertDetail
	for _, e := range w.Account.PublishedEvents() {
		if e.DetailType != notify.DetailTypeAlert {
			continue
		}
		var d notify.AlertDetail
		require.NoError(t, json.Unmarshal([]byte(e.Detail), &d))
		if d.Alert == kind && d.Group == w.g.Name {
			out = append(out, d)
		}
	}
	return out
}

// run runs the world for d, one agent iteration per tick, asserting the invariants on every step.
func (w alertWorld) run(t *testing.T, d time.Duration) {
	t.Helper()
	_, err := w.RunUntil(context.Background(), tick, d, func() bool { return false })
	require.NoError(t, err)
}

// An opted-in group with a tag the agent does not accept is left alone and has no status line: the typo is
// alerted once (metric and notification), not every pass, and heard again only after it was fixed and made
// again.
func TestMisconfiguredGroupIsAlertedOnceNotEveryPass(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2, Tags: map[string]string{model.TagBatchSize: "0"}}
	w := buildAlerting(t, oneGroup(&g), g)
	settle(t, w.World, 30*time.Minute)
	require.Equal(t, 1.0, w.alerts(model.AlertMisconfigured), "once, not per pass")
	notes := w.notified(t, model.AlertMisconfigured)
	require.Len(t, notes, 1)
	require.Contains(t, notes[0].Detail, model.TagBatchSize)
	require.Empty(t, w.Checker.Finish())
}
