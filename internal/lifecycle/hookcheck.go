package lifecycle

import (
	"context"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// MissingHooks returns what a managed group lacks for safe terminations: without a terminating lifecycle
// hook of its own (ECS's managed draining hook aside), scale-in, rebalancing and instance refresh terminate
// instances without the agent draining them first. The answer is a sentence for status and logs, or "".
func MissingHooks(ctx context.Context, api awsapi.AutoScaling, group string) (string, error) {
	c, err := CheckHooks(ctx, api, group, 0)
	return c.Missing, err
}

// missingHookNote is MissingHooks' sentence.
const missingHookNote = "no terminating lifecycle hook: scale-in, rebalancing and instance refresh terminate instances " +
	"without a drain (docs/deploy.md: add one that notifies the agent's queue)"
