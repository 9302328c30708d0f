package ecsdrain

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// Room is what the rest of a cluster can take of the tasks of one container instance that is about to be
// drained, and whether another drain is under way in the cluster. Amazon ECS Developer Guide, "Draining Amazon
// ECS container instances": the service scheduler replaces a draining instance's service tasks on other
// ACTIVE instances of the cluster, as their resources allow; "Amazon ECS task placement": a task is placed only
// on a container instance whose remaining CPU and memory cover the task's.
type Room struct {
	// Tasks counts the service tasks, daemon-service tasks excluded, on the instance whose lastStatus is not
	// STOPPED: the tasks the drain moves.
	Tasks int
	// Unplaced counts those of Tasks that find no room on the other ACTIVE, agent-connected container instances
	// of the cluster (first fit, largest task first, by task-level CPU units and memory MiB against
	// remainingResources). 0: the rest of the cluster can take every task.
	Unplaced int
	// Standalone counts the tasks on the instance started by no service (RunTask, AWS Batch): ECS does not
	// move them; a drain waits for them to end by themselves.
	Standalone int
	// OtherDraining are the ARNs of the other container instances of the cluster that are DRAINING (any
	// group's, whoever drains them).
	OtherDraining []string
}

// Fits reports whether every task the drain moves finds room elsewhere.
func (r Room) Fits() bool { return r.Unplaced == 0 }

// Room looks at the whole cluster (one listing of its container instances, as FindAll) and at the tasks on
// instanceID's container instance (as Status), and reports what the other instances can take (see Room). A
// task whose size ECS does not report at task level is counted as fitting on any ACTIVE instance. It returns
// an error wrapping ErrNotRegistered when the instance has no container instance in the cluster.
func (d *Drainer) Room(ctx context.Context, cluster, instanceID string) (Room, error) {
	all, err := d.FindAll(ctx, cluster)
	if err != nil {
		return Room{}, fmt.Errorf("looking at the room in cluster %s: %w", cluster, err)
	}
	ci, ok := all[instanceID]
	if !ok {
		return Room{}, fmt.Errorf("looking at the room for EC2 instance %s in cluster %s: %w", instanceID, cluster, ErrNotRegistered)
	}
	var room Room
	type slot struct{ cpu, mem int64 }
	var free []slot
	ids := make([]string, 0, len(all))
	for id := range all {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		o := all[id]
		switch {
		case id == instanceID:
		case o.Status == StatusDraining:
			room.OtherDraining = append(room.OtherDraining, o.ARN)
		case o.Healthy():
			free = append(free, slot{o.RemainingCPU, o.RemainingMemory})
		}
	}
	tasks, err := d.tasksWith(ctx, cluster, ci.ARN, types.DesiredStatusRunning) // the tasks ECS wants running: those the drain moves
	if err != nil {
		return Room{}, fmt.Errorf("looking at the tasks of container instance %s: %w", ci.ARN, err)
	}
	var services []string
	for _, t := range tasks {
		if svc, ok := strings.CutPrefix(aws.ToString(t.Group), serviceGroupPrefix); ok {
			services = append(services, svc)
		}
	}
	daemon, err := d.daemonServices(ctx, cluster, services)
	if err != nil {
		return Room{}, fmt.Errorf("looking at the tasks of container instance %s: %w", ci.ARN, err)
	}
	var moving []slot
	for _, t := range tasks {
		if aws.ToString(t.LastStatus) == lastStatusStopped || aws.ToString(t.DesiredStatus) == lastStatusStopped {
			continue
		}
		svc, isService := strings.CutPrefix(aws.ToString(t.Group), serviceGroupPrefix)
		switch {
		case !isService:
			room.Standalone++
		case !daemon[svc]:
			moving = append(moving, slot{size(t.Cpu), size(t.Memory)})
		}
	}
	room.Tasks = len(moving)
	slices.SortFunc(moving, func(a, b slot) int { return int(b.cpu+b.mem) - int(a.cpu+a.mem) })
	for _, m := range moving {
		placed := false
		for i := range free {
			f := &free[i]
			if (f.cpu < 0 || f.cpu >= m.cpu) && (f.mem < 0 || f.mem >= m.mem) {
				if f.cpu >= 0 {
					f.cpu -= m.cpu
				}
				if f.mem >= 0 {
					f.mem -= m.mem
				}
				placed = true
				break
			}
		}
		if !placed {
			room.Unplaced++
		}
	}
	return room, nil
}

// size parses a task's cpu (CPU units) or memory (MiB) as DescribeTasks reports it; 0 when absent.
func size(s *string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(aws.ToString(s)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// remaining returns the integer value of the named resource (CPU, MEMORY) of a container instance's
// remainingResources, or -1 when absent.
func remaining(rs []types.Resource, name string) int64 {
	for _, r := range rs {
		if aws.ToString(r.Name) == name && aws.ToString(r.Type) == "INTEGER" {
			return int64(r.IntegerValue)
		}
	}
	return -1
}
