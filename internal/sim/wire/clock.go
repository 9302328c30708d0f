package wire

import (
	"context"
	"time"

	"github.com/patch-agent/patch-agent/internal/sim"
)

// Drive moves the simulated account's clock with the wall clock until ctx ends: every step (of wall time) it
// advances the account by the wall time elapsed since the last step, times speed, running every simulated
// behaviour that fell due (sim.Account.Advance). A binary on the wall clock then sees the served world move in
// step with it: with boot and drain delays of seconds (sim.Options), a rollout takes seconds of wall time.
func Drive(ctx context.Context, acct *sim.Account, speed float64, step time.Duration) {
	last := time.Now()
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			acct.Advance(time.Duration(float64(now.Sub(last)) * speed))
			last = now
		}
	}
}
