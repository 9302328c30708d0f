// Package ecsdrain finds, drains and watches Amazon ECS container instances for a rollout: it maps an EC2
// instance id to its container instance, sets the container instance DRAINING (or back to ACTIVE), and decides
// from the instance's tasks — never from its task counters — when the drain is finished.
//
// Behaviour follows the Amazon ECS Developer Guide, "Draining Amazon ECS container instances"
// (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/container-instance-draining.html), and the
// Amazon ECS API Reference of each call made:
//   - ListContainerInstances (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ListContainerInstances.html):
//     returns only ARNs, at most 100 a page, followed through nextToken.
//   - DescribeContainerInstances (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeContainerInstances.html):
//     at most 100 container instances a call; gives the EC2 instance id, status and agent connection.
//   - UpdateContainerInstancesState (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_UpdateContainerInstancesState.html):
//     sets DRAINING or ACTIVE; per-instance problems come back in Failures, not as an error.
//   - ListTasks (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ListTasks.html):
//     filters by desiredStatus, RUNNING when unset; tasks being stopped have desiredStatus STOPPED.
//   - DescribeTasks (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeTasks.html):
//     at most 100 tasks a call; gives each task's lastStatus and group ("service:<name>").
//   - DescribeServices (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeServices.html):
//     at most 10 services a call; gives the schedulingStrategy (REPLICA or DAEMON).
//
// Failure reasons are listed in "Amazon ECS API failure reasons"
// (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/api_failures_messages.html); MISSING means the
// resource is not (or no longer) there.
package ecsdrain

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// API limits of the calls this package makes.
const (
	// maxListResults is the largest maxResults of ListContainerInstances and ListTasks (also their default).
	maxListResults = 100
	// maxDescribeContainerInstances is the most container instances one DescribeContainerInstances call takes.
	maxDescribeContainerInstances = 100
	// maxDescribeTasks is the most tasks one DescribeTasks call takes.
	maxDescribeTasks = 100
	// maxDescribeServices is the most services one DescribeServices call takes.
	maxDescribeServices = 10
)

// failureReasonMissing is the Failure reason ECS gives for a resource that does not exist (any more).
const failureReasonMissing = "MISSING"

// Container instance statuses (ContainerInstance.Status).
const (
	StatusActive   = string(types.ContainerInstanceStatusActive)
	StatusDraining = string(types.ContainerInstanceStatusDraining)
	StatusInactive = "INACTIVE"
)

// ErrNotRegistered is returned (wrapped) when the EC2 instance has no container instance in the cluster, or the
// container instance is no longer registered (ECS Failure reason MISSING). Test with errors.Is.
var ErrNotRegistered = errors.New("no container instance registered in the cluster")

// FailureError is one entry of an ECS response's Failures: the call as a whole succeeded, but not for this
// resource. Errors returned by this package wrap it; test with errors.As.
type FailureError struct {
	// ARN of the resource that failed (container instance, task or service).
	ARN string
	// Reason is ECS's failure reason, e.g. "MISSING".
	Reason string
	// Detail is ECS's free-text detail, often empty.
	Detail string
}

// Error implements error.
func (e *FailureError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s: %s", e.ARN, e.Reason)
	}
	return fmt.Sprintf("%s: %s (%s)", e.ARN, e.Reason, e.Detail)
}

// failuresError joins the Failures of an ECS response into one error (nil when there are none). Failures whose
// reason is MISSING are left out when skipMissing is set.
func failuresError(failures []types.Failure, skipMissing bool) error {
	var errs []error
	for _, f := range failures {
		if skipMissing && aws.ToString(f.Reason) == failureReasonMissing {
			continue
		}
		errs = append(errs, &FailureError{ARN: aws.ToString(f.Arn), Reason: aws.ToString(f.Reason), Detail: aws.ToString(f.Detail)})
	}
	return errors.Join(errs...)
}

// ContainerInstance is what the agent needs to know about one ECS container instance.
type ContainerInstance struct {
	// ARN is the container instance ARN.
	ARN string
	// EC2InstanceID is the id of the EC2 instance behind it (i-...).
	EC2InstanceID string
	// Status is ACTIVE, DRAINING, REGISTERING, DEREGISTERING or REGISTRATION_FAILED.
	Status string
	// AgentConnected reports whether the ECS container agent is connected to ECS.
	AgentConnected bool
	// RunningTasks and PendingTasks are ECS's counters (runningTasksCount, pendingTasksCount). They are
	// informational only: tasks that are stopping count in neither (see Drainer.Status).
	RunningTasks, PendingTasks int32
	// RemainingCPU (CPU units, 1024 a vCPU) and RemainingMemory (MiB) are the container instance's
	// remainingResources CPU and MEMORY: what is left for new tasks once the tasks placed on it are counted
	// (Amazon ECS API Reference, "ContainerInstance" / "Resource"). -1 when ECS did not report them.
	RemainingCPU, RemainingMemory int64
	// HeldPorts are the host ports of remainingResources PORTS: those the ECS container agent reserved and
	// those task containers hold on the instance (host or bridge network mode); any other port is free for a
	// new task (Amazon ECS API Reference, "ContainerInstance"). Nil when ECS did not report them.
	HeldPorts []string
}

// current reports whether the container instance is one an instance's drain may be checked on without listing
// its cluster: not deregistered (INACTIVE) and its ECS container agent connected.
func (c ContainerInstance) current() bool {
	return c.Status != StatusInactive && c.AgentConnected
}

// Healthy reports whether a replacement can take work: status ACTIVE and agent connected.
func (c ContainerInstance) Healthy() bool {
	return c.Status == StatusActive && c.AgentConnected
}

func fromAPI(c types.ContainerInstance) ContainerInstance {
	return ContainerInstance{
		ARN:             aws.ToString(c.ContainerInstanceArn),
		EC2InstanceID:   aws.ToString(c.Ec2InstanceId),
		Status:          aws.ToString(c.Status),
		AgentConnected:  c.AgentConnected,
		RunningTasks:    c.RunningTasksCount,
		PendingTasks:    c.PendingTasksCount,
		RemainingCPU:    remaining(c.RemainingResources, "CPU"),
		RemainingMemory: remaining(c.RemainingResources, "MEMORY"),
		HeldPorts:       remainingSet(c.RemainingResources, "PORTS"),
	}
}

// Drainer finds, drains and checks the container instances of ECS clusters. It is safe for concurrent use.
type Drainer struct {
	api awsapi.ECS

	mu sync.Mutex
	// daemon caches, per cluster (as passed by the caller) and service name, whether the service's
	// schedulingStrategy is DAEMON. A service's scheduling strategy cannot be changed after creation, so
	// entries never go stale; services ECS reports MISSING are not cached.
	daemon map[string]map[string]bool
	// arns caches, per cluster and EC2 instance id, the container instance ARN last seen for the instance:
	// the mapping does not change while the instance stays registered, so Find describes the one ARN
	// instead of listing the cluster again. A MISSING answer drops the entry.
	arns map[string]map[string]string
	// checks holds, per cluster and container instance ARN, what the last drain check (Status) found:
	// StillDrained and StillBusy trust it only while the container instance stays DRAINING, and only as far
	// as ECS's task counters allow. At most maxDrainChecks entries a cluster, the oldest dropped first.
	checks map[string]map[string]drainCheck
	seq    uint64 // orders checks' entries, oldest first
}

// drainCheck is what the last Status of a container instance found.
type drainCheck struct {
	drained bool
	// daemon counts the daemon-service tasks that were not STOPPED (DrainStatus.RemainingDaemon), standalone
	// the standalone tasks among those that blocked the drain (DrainStatus.Standalone).
	daemon, standalone int
	seq                uint64
}

// maxDrainChecks bounds the drain checks a Drainer remembers per cluster: drains in flight at once are far
// fewer, and a forgotten check only costs one listing of the instance's tasks.
const maxDrainChecks = 1000

// New returns a Drainer that calls ECS through api.
func New(api awsapi.ECS) *Drainer {
	return &Drainer{api: api, daemon: make(map[string]map[string]bool), arns: make(map[string]map[string]string),
		checks: make(map[string]map[string]drainCheck)}
}

// StillDrained reports whether ci, just described, is known to be drained without listing its tasks again: an
// earlier Status of the same container instance ARN found it drained, and it is still DRAINING with no task
// running or pending (runningTasksCount, pendingTasksCount). While a container instance is DRAINING, ECS
// places no new task on it (Amazon ECS Developer Guide, "Draining Amazon ECS container instances"), so a
// drain once finished stays finished; the counters catch a task placed while it was briefly ACTIVE in between.
// A container instance registered again has a new ARN and no such record.
func (d *Drainer) StillDrained(cluster string, ci ContainerInstance) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.checks[cluster][ci.ARN]
	return ok && c.drained && ci.Status == StatusDraining && ci.RunningTasks == 0 && ci.PendingTasks == 0
}

// StillBusy reports whether ci, just described, is known not to be drained without listing its tasks: an
// earlier Status of the same container instance ARN counted daemon daemon-service tasks not STOPPED, and ECS
// still counts more than daemon tasks running or pending on it (runningTasksCount + pendingTasksCount) while it
// is DRAINING. No task is placed on a DRAINING container instance, so its daemon tasks can only have
// decreased since: at least one task that blocks the drain is still running or pending. remaining is that
// lower bound (the count above daemon), standalone the standalone tasks the last listing found. The converse
// proves nothing — tasks that are stopping count in neither counter (field case C8) — so a count at or
// below daemon is checked in full (Status). Setting the container instance ACTIVE forgets the check.
func (d *Drainer) StillBusy(cluster string, ci ContainerInstance) (remaining, standalone int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, known := d.checks[cluster][ci.ARN]
	counted := int(ci.RunningTasks) + int(ci.PendingTasks)
	if !known || ci.Status != StatusDraining || counted <= c.daemon {
		return 0, 0, false
	}
	if c.drained {
		// Drained at that check, busy now: it was set ACTIVE and given tasks since without this Drainer. Once
		// the counters fall to zero again a task may still be stopping (C8): StillDrained no longer answers.
		c.drained = false
		d.checks[cluster][ci.ARN] = c
	}
	return counted - c.daemon, c.standalone, true
}

// forgetCheck drops the last drain check of arn: the container instance goes back in service, where tasks,
// daemon tasks included, may be placed on it again.
func (d *Drainer) forgetCheck(cluster, arn string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.checks[cluster], arn)
}

// noteCheck records the outcome st of a drain check of arn (StillDrained, StillBusy).
func (d *Drainer) noteCheck(cluster, arn string, st DrainStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.checks[cluster] == nil {
		d.checks[cluster] = map[string]drainCheck{}
	}
	m := d.checks[cluster]
	d.seq++
	m[arn] = drainCheck{drained: st.Drained, daemon: st.RemainingDaemon, standalone: st.Standalone, seq: d.seq}
	if len(m) <= maxDrainChecks {
		return
	}
	oldest, at := "", d.seq
	for a, c := range m {
		if c.seq < at {
			oldest, at = a, c.seq
		}
	}
	delete(m, oldest)
}

// Find maps an EC2 instance id to its container instance in cluster. ListContainerInstances returns only ARNs,
// so Find follows every page (100 ARNs a page) and describes each page's ARNs in calls of at most 100, stopping
// at the page where the instance is found (field case C7). Container instances that deregister between the
// listing and the describe are skipped. It returns an error wrapping ErrNotRegistered when the cluster has no
// container instance for instanceID, and a wrapped *FailureError for any other describe failure.
//
// When an earlier listing or Find saw the instance's container instance, Find describes that one ARN (one
// call) instead, and lists the cluster when it is no longer the instance's current one: MISSING or INACTIVE
// (deregistered) or its ECS container agent disconnected, for the instance may have registered again under a
// new ARN. Of two container instances that name the instance, the one whose agent is connected is its own.
func (d *Drainer) Find(ctx context.Context, cluster, instanceID string) (ContainerInstance, error) {
	if arn := d.knownARN(cluster, instanceID); arn != "" {
		cis, err := d.describe(ctx, cluster, []string{arn}, true)
		if err != nil {
			return ContainerInstance{}, fmt.Errorf("finding container instance of EC2 instance %s: %w", instanceID, err)
		}
		if len(cis) == 1 && cis[0].EC2InstanceID == instanceID && cis[0].current() {
			return cis[0], nil
		}
		// Deregistered (MISSING or INACTIVE) or its agent disconnected: the instance may have registered again
		// under a new ARN (Amazon ECS Developer Guide, "Amazon ECS container instance lifecycle"), so the
		// cluster is listed.
		d.forgetARN(cluster, instanceID)
	}
	var found ContainerInstance
	ok := false
	err := d.eachPage(ctx, cluster, func(page []ContainerInstance) bool {
		for _, ci := range page {
			if ci.EC2InstanceID == instanceID && (!ok || !found.AgentConnected) {
				found, ok = ci, true
			}
		}
		return !ok || !found.AgentConnected // one left behind by an agent that registered afresh is not the instance's
	})
	if err != nil {
		return ContainerInstance{}, fmt.Errorf("finding container instance of EC2 instance %s: %w", instanceID, err)
	}
	if !ok {
		return ContainerInstance{}, fmt.Errorf("finding container instance of EC2 instance %s in cluster %s: %w", instanceID, cluster, ErrNotRegistered)
	}
	d.rememberARNs(cluster, []ContainerInstance{found}) // the chosen one, whatever the page order
	return found, nil
}

// FindAll returns every container instance of cluster (all statuses but INACTIVE, which ECS does not list),
// keyed by EC2 instance id: one listing of all pages and describes of at most 100 ARNs a call. It is meant to be
// called once per reconcile tick for a whole Auto Scaling group; instances of the group missing from the map
// are not registered. When two container instances name one EC2 instance (its ECS container agent registered
// afresh, leaving the old one registered with its agent disconnected), the one whose agent is connected is
// the instance's: the old one runs no new task.
func (d *Drainer) FindAll(ctx context.Context, cluster string) (map[string]ContainerInstance, error) {
	all := make(map[string]ContainerInstance)
	err := d.eachPage(ctx, cluster, func(page []ContainerInstance) bool {
		for _, ci := range page {
			if prev, ok := all[ci.EC2InstanceID]; ok && prev.AgentConnected && !ci.AgentConnected {
				continue
			}
			all[ci.EC2InstanceID] = ci
		}
		return true
	})
	d.rememberARNs(cluster, slices.Collect(maps.Values(all))) // the chosen one of each instance, whatever the page order
	if err != nil {
		return nil, err
	}
	return all, nil
}

// eachPage lists the container instances of cluster page by page, describes each page in calls of at most
// maxDescribeContainerInstances ARNs and hands the described page to fn; it stops when fn returns false.
func (d *Drainer) eachPage(ctx context.Context, cluster string, fn func([]ContainerInstance) bool) error {
	var token *string
	for {
		out, err := d.api.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{
			Cluster:    aws.String(cluster),
			MaxResults: aws.Int32(maxListResults),
			NextToken:  token,
		})
		if err != nil {
			return fmt.Errorf("listing container instances of cluster %s: %w", cluster, err)
		}
		page, err := d.describe(ctx, cluster, out.ContainerInstanceArns, true)
		if err != nil {
			return err
		}
		d.rememberARNs(cluster, page)
		if !fn(page) {
			return nil
		}
		if aws.ToString(out.NextToken) == "" {
			return nil
		}
		token = out.NextToken
	}
}

// KnownARN returns the container instance ARN last listed or found for the EC2 instance instanceID in
// cluster; "" when none was. The ARN may be stale: the container instance may have been deregistered since,
// or the instance registered again under a new ARN (callers describe it before trusting it).
func (d *Drainer) KnownARN(cluster, instanceID string) string { return d.knownARN(cluster, instanceID) }

// DescribeARNs describes the container instances arns of cluster (DescribeContainerInstances, at most 100 a
// call) without listing the cluster. An ARN ECS reports MISSING is left out of the answer; any other
// failure is a wrapped *FailureError. A deregistered container instance is described with status INACTIVE.
func (d *Drainer) DescribeARNs(ctx context.Context, cluster string, arns []string) ([]ContainerInstance, error) {
	return d.describe(ctx, cluster, arns, true)
}

func (d *Drainer) knownARN(cluster, instanceID string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.arns[cluster][instanceID]
}

func (d *Drainer) forgetARN(cluster, instanceID string) {
	d.mu.Lock()
	delete(d.arns[cluster], instanceID)
	d.mu.Unlock()
}

func (d *Drainer) rememberARNs(cluster string, page []ContainerInstance) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.arns[cluster] == nil {
		d.arns[cluster] = map[string]string{}
	}
	for _, ci := range page {
		if ci.EC2InstanceID != "" {
			d.arns[cluster][ci.EC2InstanceID] = ci.ARN
		}
	}
}

// describe describes arns in calls of at most maxDescribeContainerInstances. MISSING failures are skipped when
// skipMissing is set; any other failure is an error.
func (d *Drainer) describe(ctx context.Context, cluster string, arns []string, skipMissing bool) ([]ContainerInstance, error) {
	cis := make([]ContainerInstance, 0, len(arns))
	for batch := range slices.Chunk(arns, maxDescribeContainerInstances) {
		out, err := d.api.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{
			Cluster:            aws.String(cluster),
			ContainerInstances: batch,
		})
		if err != nil {
			return nil, fmt.Errorf("describing %d container instances of cluster %s: %w", len(batch), cluster, err)
		}
		if err := failuresError(out.Failures, skipMissing); err != nil {
			return nil, fmt.Errorf("describing container instances of cluster %s: %w", cluster, err)
		}
		for _, c := range out.ContainerInstances {
			cis = append(cis, fromAPI(c))
		}
	}
	return cis, nil
}

// StartDrain sets the container instance DRAINING (UpdateContainerInstancesState). ECS then stops no new tasks
// there, stops its PENDING service tasks and replaces its RUNNING service tasks elsewhere. Only ci.ARN is used:
// the current status is read first (ci may be stale), and StartDrain is a no-op when the container instance is
// already DRAINING — whoever set it, ECS managed draining included (field case C17). It returns an error
// wrapping ErrNotRegistered when the container instance is gone, and a wrapped *FailureError for any other
// failure ECS reports for it.
func (d *Drainer) StartDrain(ctx context.Context, cluster string, ci ContainerInstance) error {
	return d.setStatus(ctx, cluster, ci.ARN, types.ContainerInstanceStatusDraining)
}

// Undrain puts the container instance back to ACTIVE, for when a drain is abandoned and the old instance keeps
// serving. Like StartDrain it reads the current status first and is a no-op when already ACTIVE; errors are
// the same.
func (d *Drainer) Undrain(ctx context.Context, cluster string, ci ContainerInstance) error {
	return d.setStatus(ctx, cluster, ci.ARN, types.ContainerInstanceStatusActive)
}

// StartDrainFound is StartDrain for a container instance Find (or FindAll) has just described: its Status is
// current, so it is not read again (one call fewer). A no-op when ci is already DRAINING.
func (d *Drainer) StartDrainFound(ctx context.Context, cluster string, ci ContainerInstance) error {
	return d.update(ctx, cluster, ci, types.ContainerInstanceStatusDraining)
}

// UndrainFound is Undrain for a container instance Find has just described. A no-op when ci is ACTIVE.
func (d *Drainer) UndrainFound(ctx context.Context, cluster string, ci ContainerInstance) error {
	return d.update(ctx, cluster, ci, types.ContainerInstanceStatusActive)
}

func (d *Drainer) update(ctx context.Context, cluster string, ci ContainerInstance, want types.ContainerInstanceStatus) error {
	if want == types.ContainerInstanceStatusActive {
		d.forgetCheck(cluster, ci.ARN) // back in service: tasks may land on it again
	}
	if ci.Status == string(want) {
		return nil
	}
	// A check made before the container instance left DRAINING (set ACTIVE by someone else, tasks placed)
	// says nothing about the tasks it has now: the drain this sets is checked in full.
	d.forgetCheck(cluster, ci.ARN)
	out, err := d.api.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{
		Cluster:            aws.String(cluster),
		ContainerInstances: []string{ci.ARN},
		Status:             want,
	})
	if err == nil && missing(out.Failures) {
		err = ErrNotRegistered
	} else if err == nil {
		err = failuresError(out.Failures, false)
	}
	if err != nil {
		return fmt.Errorf("setting container instance %s of cluster %s %s: %w", ci.ARN, cluster, want, err)
	}
	return nil
}

func (d *Drainer) setStatus(ctx context.Context, cluster, arn string, want types.ContainerInstanceStatus) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("setting container instance %s of cluster %s %s: %w", arn, cluster, want, err)
		}
	}()
	if want == types.ContainerInstanceStatusActive {
		d.forgetCheck(cluster, arn)
	}
	cur, err := d.api.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{
		Cluster:            aws.String(cluster),
		ContainerInstances: []string{arn},
	})
	if err != nil {
		return fmt.Errorf("reading current status: %w", err)
	}
	if missing(cur.Failures) {
		return ErrNotRegistered
	}
	if err := failuresError(cur.Failures, false); err != nil {
		return fmt.Errorf("reading current status: %w", err)
	}
	if len(cur.ContainerInstances) == 0 {
		return ErrNotRegistered
	}
	if aws.ToString(cur.ContainerInstances[0].Status) == string(want) {
		return nil
	}
	d.forgetCheck(cluster, arn) // as in update: a check from before it left DRAINING is stale
	out, err := d.api.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{
		Cluster:            aws.String(cluster),
		ContainerInstances: []string{arn},
		Status:             want,
	})
	if err != nil {
		return err
	}
	if missing(out.Failures) {
		return ErrNotRegistered
	}
	return failuresError(out.Failures, false)
}

// missing reports whether one of failures has reason MISSING.
func missing(failures []types.Failure) bool {
	for _, f := range failures {
		if aws.ToString(f.Reason) == failureReasonMissing {
			return true
		}
	}
	return false
}
