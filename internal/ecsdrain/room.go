package ecsdrain

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// Room is what the rest of a cluster can take of the tasks of one container instance that is about to be
// drained, and whether another drain is under way in the cluster. Amazon ECS Developer Guide, "Draining Amazon
// ECS container instances": the service scheduler replaces a draining instance's service tasks on other
// ACTIVE instances of the cluster, as their resources allow; "Amazon ECS task placement": a task is placed only
// on a container instance whose remaining CPU, memory and ports cover the task's; "Amazon ECS task placement
// constraints": a service with the distinctInstance constraint places each of its tasks on a different
// container instance.
type Room struct {
	// Tasks counts the service tasks, daemon-service tasks excluded, on the instance whose lastStatus is not
	// STOPPED: the tasks the drain moves.
	Tasks int
	// Unplaced counts those of Tasks that find no room on the other ACTIVE, agent-connected container instances
	// of the cluster (first fit, largest task first): a task fits where its task-level CPU units and memory MiB
	// are within remainingResources, none of its containers' host ports is among the instance's held ports
	// (remainingResources PORTS, and the ports of the tasks this count already placed there), and, for a
	// service with the distinctInstance constraint, no task of the service runs or was placed there.
	// 0: the rest of the cluster can take every task.
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
// instanceID's container instance (as Status), and reports what the other instances can take (see Room). The
// services of the tasks that move are described afresh (DescribeServices: placementConstraints), and for a
// distinctInstance service its tasks are listed (ListTasks by serviceName, DescribeTasks) to see which
// instances already hold one. A task whose size ECS does not report at task level is counted as fitting on
// any ACTIVE instance by CPU and memory. It returns an error wrapping ErrNotRegistered when the instance has no
// container instance in the cluster.
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
	type slot struct {
		arn      string
		cpu, mem int64
		ports    map[string]bool // held host ports
		holds    map[string]bool // distinctInstance services with a task here
	}
	var free []*slot
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
			s := &slot{arn: o.ARN, cpu: o.RemainingCPU, mem: o.RemainingMemory, ports: map[string]bool{}, holds: map[string]bool{}}
			for _, p := range o.HeldPorts {
				s.ports[p] = true
			}
			free = append(free, s)
		}
	}
	tasks, err := d.tasksWith(ctx, cluster, ci.ARN, types.DesiredStatusRunning) // the tasks ECS wants running: those the drain moves
	if err != nil {
		return Room{}, fmt.Errorf("looking at the tasks of container instance %s: %w", ci.ARN, err)
	}
	var services []string
	for _, t := range tasks {
		if svc, ok := strings.CutPrefix(aws.ToString(t.Group), serviceGroupPrefix); ok && !slices.Contains(services, svc) {
			services = append(services, svc)
		}
	}
	daemon, err := d.daemonServices(ctx, cluster, services)
	if err != nil {
		return Room{}, fmt.Errorf("looking at the tasks of container instance %s: %w", ci.ARN, err)
	}
	type moving struct {
		cpu, mem int64
		service  string
		ports    []string
	}
	var move []moving
	for _, t := range tasks {
		if aws.ToString(t.LastStatus) == lastStatusStopped || aws.ToString(t.DesiredStatus) == lastStatusStopped {
			continue
		}
		svc, isService := strings.CutPrefix(aws.ToString(t.Group), serviceGroupPrefix)
		switch {
		case !isService:
			room.Standalone++
		case !daemon[svc]:
			move = append(move, moving{cpu: size(t.Cpu), mem: size(t.Memory), service: svc, ports: hostPorts(t)})
		}
	}
	room.Tasks = len(move)
	var moved []string
	for _, m := range move {
		if !slices.Contains(moved, m.service) {
			moved = append(moved, m.service)
		}
	}
	distinct, err := d.distinctInstanceServices(ctx, cluster, moved)
	if err != nil {
		return Room{}, fmt.Errorf("looking at the placement constraints of the services on container instance %s: %w", ci.ARN, err)
	}
	for _, svc := range moved {
		if !distinct[svc] {
			continue
		}
		held, err := d.serviceTasks(ctx, cluster, svc)
		if err != nil {
			return Room{}, fmt.Errorf("looking at where the tasks of service %s run: %w", svc, err)
		}
		for _, f := range free {
			f.holds[svc] = f.holds[svc] || held[f.arn]
		}
	}
	slices.SortStableFunc(move, func(a, b moving) int { return int(b.cpu+b.mem) - int(a.cpu+a.mem) })
	for _, m := range move {
		placed := false
		for _, f := range free {
			if f.cpu >= 0 && f.cpu < m.cpu || f.mem >= 0 && f.mem < m.mem || distinct[m.service] && f.holds[m.service] ||
				slices.ContainsFunc(m.ports, func(p string) bool { return f.ports[p] }) {
				continue
			}
			if f.cpu >= 0 {
				f.cpu -= m.cpu
			}
			if f.mem >= 0 {
				f.mem -= m.mem
			}
			for _, p := range m.ports {
				f.ports[p] = true
			}
			f.holds[m.service] = true
			placed = true
			break
		}
		if !placed {
			room.Unplaced++
		}
	}
	return room, nil
}

// hostPorts returns the host ports a task's containers are bound to (networkBindings hostPort, non-zero).
func hostPorts(t types.Task) []string {
	var out []string
	for _, c := range t.Containers {
		for _, b := range c.NetworkBindings {
			if p := aws.ToInt32(b.HostPort); p != 0 {
				out = append(out, strconv.Itoa(int(p)))
			}
		}
	}
	return out
}

// distinctInstanceServices describes the named services of cluster (DescribeServices, 10 a call; not cached:
// UpdateService may change placementConstraints) and returns those with a distinctInstance placement
// constraint.
func (d *Drainer) distinctInstanceServices(ctx context.Context, cluster string, names []string) (map[string]bool, error) {
	out := map[string]bool{}
	for batch := range slices.Chunk(names, maxDescribeServices) {
		res, err := d.api.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(cluster), Services: batch})
		if err != nil {
			return nil, fmt.Errorf("describing services %s of cluster %s: %w", strings.Join(batch, ", "), cluster, err)
		}
		if err := failuresError(res.Failures, true); err != nil {
			return nil, fmt.Errorf("describing services of cluster %s: %w", cluster, err)
		}
		for _, s := range res.Services {
			for _, c := range s.PlacementConstraints {
				if c.Type == types.PlacementConstraintTypeDistinctInstance {
					out[aws.ToString(s.ServiceName)] = true
				}
			}
		}
	}
	return out, nil
}

// serviceTasks returns the container instance ARNs that hold a task of the service that is not STOPPED (its
// tasks with desired status RUNNING, listed by serviceName and described).
func (d *Drainer) serviceTasks(ctx context.Context, cluster, service string) (map[string]bool, error) {
	var arns []string
	var token *string
	for {
		out, err := d.api.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), ServiceName: aws.String(service),
			DesiredStatus: types.DesiredStatusRunning, MaxResults: aws.Int32(maxListResults), NextToken: token})
		if err != nil {
			return nil, fmt.Errorf("listing tasks of service %s in cluster %s: %w", service, cluster, err)
		}
		arns = append(arns, out.TaskArns...)
		if aws.ToString(out.NextToken) == "" {
			break
		}
		token = out.NextToken
	}
	held := map[string]bool{}
	for batch := range slices.Chunk(arns, maxDescribeTasks) {
		out, err := d.api.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: batch})
		if err != nil {
			return nil, fmt.Errorf("describing %d tasks of service %s: %w", len(batch), service, err)
		}
		if err := failuresError(out.Failures, true); err != nil {
			return nil, fmt.Errorf("describing tasks of service %s: %w", service, err)
		}
		for _, t := range out.Tasks {
			if aws.ToString(t.LastStatus) != lastStatusStopped {
				held[aws.ToString(t.ContainerInstanceArn)] = true
			}
		}
	}
	return held, nil
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

// remainingSet returns the values of the named STRINGSET resource (PORTS) of a container instance's
// remainingResources, or nil when absent.
func remainingSet(rs []types.Resource, name string) []string {
	for _, r := range rs {
		if aws.ToString(r.Name) == name && aws.ToString(r.Type) == "STRINGSET" {
			return r.StringSetValue
		}
	}
	return nil
}
