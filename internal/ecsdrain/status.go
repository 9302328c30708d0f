package ecsdrain

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// Task values this package reads.
const (
	// lastStatusStopped is the only lastStatus of a task that no longer holds the container instance.
	lastStatusStopped = "STOPPED"
	// lastStatusUnknown keys DrainStatus.ByLastStatus for a task ECS returned without lastStatus.
	lastStatusUnknown = "UNKNOWN"
	// serviceGroupPrefix starts the group of a task started by a service: "service:<service name>".
	serviceGroupPrefix = "service:"
)

// DrainStatus is the progress of a container instance's drain, from its tasks.
type DrainStatus struct {
	// Drained is true when Remaining is 0: every task on the instance is STOPPED, daemon-service tasks aside.
	Drained bool
	// Remaining counts the tasks, daemon-service tasks excluded, whose lastStatus is not STOPPED (PENDING,
	// RUNNING, DEACTIVATING, STOPPING, DEPROVISIONING, ...).
	Remaining int
	// RemainingDaemon counts the tasks of DAEMON services whose lastStatus is not STOPPED. ECS stops them last,
	// after the other tasks, so they do not block the drain.
	RemainingDaemon int
	// Standalone counts those of Remaining started by no service (RunTask, StartTask, AWS Batch): ECS does not
	// replace them elsewhere, so the drain ends only when they end by themselves (Amazon ECS Developer Guide,
	// "Draining Amazon ECS container instances": standalone tasks are not affected by draining).
	Standalone int
	// ByLastStatus counts every task on the instance (desiredStatus RUNNING or STOPPED, daemon or not) by its
	// lastStatus, for status reports and logs.
	ByLastStatus map[string]int
}

// Status reports whether the drain of ci is finished (field case C8). Drained means no task on the instance
// other than STOPPED, daemon-service tasks aside (they stop last and do not block). It does not trust
// runningTasksCount + pendingTasksCount: tasks in DEACTIVATING, STOPPING or DEPROVISIONING count in neither.
//
// It lists the instance's tasks with desiredStatus RUNNING and with desiredStatus STOPPED (tasks being stopped
// have desiredStatus STOPPED; ListTasks alone would only return RUNNING), following every page, describes them
// in calls of at most 100, and learns which services are DAEMON services with DescribeServices (at most 10 a
// call; a task's group is "service:<name>"). Scheduling strategies are cached per cluster in the Drainer.
// Tasks or services that vanish between calls (Failure reason MISSING) are treated as stopped or as
// non-daemon respectively; any other failure is returned as a wrapped *FailureError.
func (d *Drainer) Status(ctx context.Context, cluster string, ci ContainerInstance) (DrainStatus, error) {
	tasks, err := d.tasksOn(ctx, cluster, ci.ARN)
	if err != nil {
		return DrainStatus{}, fmt.Errorf("checking drain of container instance %s: %w", ci.ARN, err)
	}

	var services []string
	for _, t := range tasks {
		if svc, ok := strings.CutPrefix(aws.ToString(t.Group), serviceGroupPrefix); ok && aws.ToString(t.LastStatus) != lastStatusStopped {
			services = append(services, svc)
		}
	}
	daemon, err := d.daemonServices(ctx, cluster, services)
	if err != nil {
		return DrainStatus{}, fmt.Errorf("checking drain of container instance %s: %w", ci.ARN, err)
	}

	st := DrainStatus{ByLastStatus: make(map[string]int)}
	for _, t := range tasks {
		last := aws.ToString(t.LastStatus)
		if last == "" {
			last = lastStatusUnknown
		}
		st.ByLastStatus[last]++
		if last == lastStatusStopped {
			continue
		}
		svc, isService := strings.CutPrefix(aws.ToString(t.Group), serviceGroupPrefix)
		if isService && daemon[svc] {
			st.RemainingDaemon++
			continue
		}
		st.Remaining++
		if !isService {
			st.Standalone++
		}
	}
	st.Drained = st.Remaining == 0
	d.noteCheck(cluster, ci.ARN, st)
	return st, nil
}

// tasksOn lists every task on the container instance, desiredStatus RUNNING and STOPPED, and describes them.
func (d *Drainer) tasksOn(ctx context.Context, cluster, containerInstanceARN string) ([]types.Task, error) {
	return d.tasksWith(ctx, cluster, containerInstanceARN, types.DesiredStatusRunning, types.DesiredStatusStopped)
}

// tasksWith lists the tasks on the container instance with the given desired statuses, and describes them.
func (d *Drainer) tasksWith(ctx context.Context, cluster, containerInstanceARN string, statuses ...types.DesiredStatus) ([]types.Task, error) {
	seen := make(map[string]bool)
	var arns []string
	for _, desired := range statuses {
		var token *string
		for {
			out, err := d.api.ListTasks(ctx, &ecs.ListTasksInput{
				Cluster:           aws.String(cluster),
				ContainerInstance: aws.String(containerInstanceARN),
				DesiredStatus:     desired,
				MaxResults:        aws.Int32(maxListResults),
				NextToken:         token,
			})
			if err != nil {
				return nil, fmt.Errorf("listing tasks of cluster %s with desired status %s: %w", cluster, desired, err)
			}
			for _, arn := range out.TaskArns {
				if !seen[arn] { // a task whose desired status changes between the two listings shows up twice
					seen[arn] = true
					arns = append(arns, arn)
				}
			}
			if aws.ToString(out.NextToken) == "" {
				break
			}
			token = out.NextToken
		}
	}

	tasks := make([]types.Task, 0, len(arns))
	for batch := range slices.Chunk(arns, maxDescribeTasks) {
		out, err := d.api.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: batch})
		if err != nil {
			return nil, fmt.Errorf("describing %d tasks of cluster %s: %w", len(batch), cluster, err)
		}
		if err := failuresError(out.Failures, true); err != nil {
			return nil, fmt.Errorf("describing tasks of cluster %s: %w", cluster, err)
		}
		tasks = append(tasks, out.Tasks...)
	}
	return tasks, nil
}

// daemonServices reports, for each named service of cluster, whether its schedulingStrategy is DAEMON. Names
// not yet cached are described in calls of at most maxDescribeServices; the lock is not held during calls.
func (d *Drainer) daemonServices(ctx context.Context, cluster string, names []string) (map[string]bool, error) {
	daemon := make(map[string]bool, len(names))
	var unknown []string
	d.mu.Lock()
	cached := d.daemon[cluster]
	for _, n := range names {
		if _, done := daemon[n]; done {
			continue
		}
		if isDaemon, ok := cached[n]; ok {
			daemon[n] = isDaemon
			continue
		}
		daemon[n] = false // until described
		unknown = append(unknown, n)
	}
	d.mu.Unlock()

	for batch := range slices.Chunk(unknown, maxDescribeServices) {
		out, err := d.api.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(cluster), Services: batch})
		if err != nil {
			return nil, fmt.Errorf("describing services %s of cluster %s: %w", strings.Join(batch, ", "), cluster, err)
		}
		if err := failuresError(out.Failures, true); err != nil {
			return nil, fmt.Errorf("describing services of cluster %s: %w", cluster, err)
		}
		d.mu.Lock()
		if d.daemon[cluster] == nil {
			d.daemon[cluster] = make(map[string]bool)
		}
		for _, s := range out.Services {
			name := aws.ToString(s.ServiceName)
			isDaemon := s.SchedulingStrategy == types.SchedulingStrategyDaemon
			d.daemon[cluster][name] = isDaemon
			if _, asked := daemon[name]; asked {
				daemon[name] = isDaemon
			}
		}
		d.mu.Unlock()
	}
	return daemon, nil
}
