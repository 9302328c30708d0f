package lifecycle

import (
	"context"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
)

// ClusterRoom is implemented by platforms that can tell whether the rest of a cluster can take the tasks of an
// instance about to be drained (ECSPlatform).
type ClusterRoom interface {
	// Room reports the room the other container instances of cluster have for the tasks of instanceID, and the
	// other DRAINING container instances of the cluster (ecsdrain.Room). An instance without a container
	// instance returns an error wrapping ecsdrain.ErrNotRegistered.
	Room(ctx context.Context, cluster, instanceID string) (ecsdrain.Room, error)
}

// Room implements ClusterRoom.
func (p ECSPlatform) Room(ctx context.Context, cluster, instanceID string) (ecsdrain.Room, error) {
	return p.Drainer.Room(ctx, cluster, instanceID)
}
