package ecsdrain_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
)

func maxDescribeBatch(f *fakeECS) int {
	most := 0
	for _, in := range f.describeCI {
		most = max(most, len(in.ContainerInstances))
	}
	return most
}

func TestFindC7OnPage3Of250(t *testing.T) {
	// C7 finds the container instance on page 3 of 250: the target is the 230th container instance.
	f := newFakeECS()
	f.addInstances(250, ecsdrain.StatusActive)
	d := ecsdrain.New(f)

	ci, err := d.Find(context.Background(), testCluster, ec2ID(230))

	require.NoError(t, err)
	require.Equal(t, ciARN(230), ci.ARN)
	require.Equal(t, ec2ID(230), ci.EC2InstanceID)
	require.Len(t, f.listCI, 3, "pages 1, 2 and 3 listed")
	require.LessOrEqual(t, maxDescribeBatch(f), 100, "no DescribeContainerInstances call had more than 100 ARNs")
}

func TestFind(t *testing.T) {
	apiErr := errors.New("connection reset")
	tests := []struct {
		name    string
		setup   func(f *fakeECS)
		find    string
		wantARN string
		check   func(t *testing.T, f *fakeECS, err error)
	}{
		{
			name:    "stops listing at the page that holds the instance",
			setup:   func(f *fakeECS) { f.addInstances(250, ecsdrain.StatusActive) },
			find:    ec2ID(42),
			wantARN: ciARN(42),
			check:   func(t *testing.T, f *fakeECS, err error) { require.Len(t, f.listCI, 1) },
		},
		{
			name:  "ErrNotRegistered when the instance is absent",
			setup: func(f *fakeECS) { f.addInstances(250, ecsdrain.StatusActive) },
			find:  "i-0fffffffffffffff0",
			check: func(t *testing.T, f *fakeECS, err error) { require.ErrorIs(t, err, ecsdrain.ErrNotRegistered) },
		},
		{
			name:  "ErrNotRegistered in an empty cluster",
			setup: func(f *fakeECS) {},
			find:  ec2ID(1),
			check: func(t *testing.T, f *fakeECS, err error) {
				require.ErrorIs(t, err, ecsdrain.ErrNotRegistered)
				require.Empty(t, f.describeCI, "nothing to describe")
			},
		},
		{
			name: "skips a container instance deregistered between listing and describe",
			setup: func(f *fakeECS) {
				f.addInstances(3, ecsdrain.StatusActive)
				f.goneAfterList[ciARN(2)] = true
			},
			find:    ec2ID(3),
			wantARN: ciARN(3),
		},
		{
			name: "a describe failure other than MISSING is an error",
			setup: func(f *fakeECS) {
				f.addInstances(3, ecsdrain.StatusActive)
				f.describeFailures[ciARN(1)] = types.Failure{Arn: aws.String(ciARN(1)), Reason: aws.String("INJECTED")}
			},
			find: ec2ID(3),
			check: func(t *testing.T, f *fakeECS, err error) {
				var fe *ecsdrain.FailureError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, "INJECTED", fe.Reason)
			},
		},
		{
			name: "a listing error is wrapped with the cluster",
			setup: func(f *fakeECS) {
				f.addInstances(3, ecsdrain.StatusActive)
				f.errs["ListContainerInstances"] = apiErr
			},
			find: ec2ID(1),
			check: func(t *testing.T, f *fakeECS, err error) {
				require.ErrorIs(t, err, apiErr)
				require.ErrorContains(t, err, "listing container instances of cluster "+testCluster)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeECS()
			tt.setup(f)
			ci, err := ecsdrain.New(f).Find(context.Background(), testCluster, tt.find)
			if tt.wantARN != "" {
				require.NoError(t, err)
				require.Equal(t, tt.wantARN, ci.ARN)
			} else {
				require.Error(t, err)
			}
			if tt.check != nil {
				tt.check(t, f, err)
			}
		})
	}
}

func TestFindAll(t *testing.T) {
	f := newFakeECS()
	f.addInstances(250, ecsdrain.StatusActive)
	f.instances[199].Status = aws.String(ecsdrain.StatusDraining)

	all, err := ecsdrain.New(f).FindAll(context.Background(), testCluster)

	require.NoError(t, err)
	require.Len(t, all, 250)
	require.Equal(t, ecsdrain.ContainerInstance{
		ARN: ciARN(200), EC2InstanceID: ec2ID(200), Status: ecsdrain.StatusDraining, AgentConnected: true,
		RemainingCPU: -1, RemainingMemory: -1, // the fake reports no remainingResources
	}, all[ec2ID(200)])
	require.Len(t, f.listCI, 3)
	require.LessOrEqual(t, maxDescribeBatch(f), 100)
}

func TestHealthy(t *testing.T) {
	tests := []struct {
		name string
		ci   ecsdrain.ContainerInstance
		want bool
	}{
		{"ACTIVE with agent connected is healthy", ecsdrain.ContainerInstance{Status: "ACTIVE", AgentConnected: true}, true},
		{"ACTIVE with agent disconnected is not healthy", ecsdrain.ContainerInstance{Status: "ACTIVE"}, false},
		{"DRAINING is not healthy", ecsdrain.ContainerInstance{Status: "DRAINING", AgentConnected: true}, false},
		{"REGISTERING is not healthy", ecsdrain.ContainerInstance{Status: "REGISTERING", AgentConnected: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.ci.Healthy())
		})
	}
}

func TestStartDrainAndUndrain(t *testing.T) {
	apiErr := errors.New("throttled")
	stale := ecsdrain.ContainerInstance{ARN: ciARN(1), EC2InstanceID: ec2ID(1), Status: ecsdrain.StatusActive, AgentConnected: true}
	tests := []struct {
		name   string
		status string // the container instance's status in ECS
		setup  func(f *fakeECS)
		run    func(ctx context.Context, d *ecsdrain.Drainer, ci ecsdrain.ContainerInstance) error
		check  func(t *testing.T, f *fakeECS, err error)
	}{
		{
			name:   "StartDrain sets an ACTIVE container instance DRAINING",
			status: ecsdrain.StatusActive,
			run:    startDrain,
			check: func(t *testing.T, f *fakeECS, err error) {
				require.NoError(t, err)
				require.Len(t, f.updates, 1)
				require.Equal(t, []string{ciARN(1)}, f.updates[0].ContainerInstances)
				require.Equal(t, types.ContainerInstanceStatusDraining, f.updates[0].Status)
				require.Equal(t, ecsdrain.StatusDraining, aws.ToString(f.instances[0].Status))
			},
		},
		{
			name:   "StartDrain twice makes no second Update call",
			status: ecsdrain.StatusActive,
			run: func(ctx context.Context, d *ecsdrain.Drainer, ci ecsdrain.ContainerInstance) error {
				if err := d.StartDrain(ctx, testCluster, ci); err != nil {
					return err
				}
				return d.StartDrain(ctx, testCluster, ci) // same, now stale, ACTIVE snapshot
			},
			check: func(t *testing.T, f *fakeECS, err error) {
				require.NoError(t, err)
				require.Len(t, f.updates, 1)
			},
		},
		{
			name:   "StartDrain makes no Update call when ECS already drains the instance (C17)",
			status: ecsdrain.StatusDraining,
			run:    startDrain,
			check: func(t *testing.T, f *fakeECS, err error) {
				require.NoError(t, err)
				require.Empty(t, f.updates)
			},
		},
		{
			name:   "StartDrain reports a failure in the response as an error",
			status: ecsdrain.StatusActive,
			setup: func(f *fakeECS) {
				f.updateFailures[ciARN(1)] = types.Failure{Arn: aws.String(ciARN(1)), Reason: aws.String("INJECTED"), Detail: aws.String("injected by the test")}
			},
			run: startDrain,
			check: func(t *testing.T, f *fakeECS, err error) {
				var fe *ecsdrain.FailureError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, ecsdrain.FailureError{ARN: ciARN(1), Reason: "INJECTED", Detail: "injected by the test"}, *fe)
				require.ErrorContains(t, err, "setting container instance "+ciARN(1))
			},
		},
		{
			name:   "StartDrain returns ErrNotRegistered when the container instance is gone",
			status: ecsdrain.StatusActive,
			setup:  func(f *fakeECS) { f.goneAfterList[ciARN(1)] = true },
			run:    startDrain,
			check: func(t *testing.T, f *fakeECS, err error) {
				require.ErrorIs(t, err, ecsdrain.ErrNotRegistered)
				require.Empty(t, f.updates)
			},
		},
		{
			name:   "StartDrain returns ErrNotRegistered when the update reports MISSING",
			status: ecsdrain.StatusActive,
			setup:  func(f *fakeECS) { f.updateFailures[ciARN(1)] = missingFailure(ciARN(1)) },
			run:    startDrain,
			check:  func(t *testing.T, f *fakeECS, err error) { require.ErrorIs(t, err, ecsdrain.ErrNotRegistered) },
		},
		{
			name:   "StartDrain wraps an API error",
			status: ecsdrain.StatusActive,
			setup:  func(f *fakeECS) { f.errs["UpdateContainerInstancesState"] = apiErr },
			run:    startDrain,
			check:  func(t *testing.T, f *fakeECS, err error) { require.ErrorIs(t, err, apiErr) },
		},
		{
			name:   "Undrain puts a DRAINING container instance back to ACTIVE even from a stale ACTIVE snapshot",
			status: ecsdrain.StatusDraining,
			run:    undrain,
			check: func(t *testing.T, f *fakeECS, err error) {
				require.NoError(t, err)
				require.Len(t, f.updates, 1)
				require.Equal(t, types.ContainerInstanceStatusActive, f.updates[0].Status)
				require.Equal(t, ecsdrain.StatusActive, aws.ToString(f.instances[0].Status))
			},
		},
		{
			name:   "Undrain makes no Update call when already ACTIVE",
			status: ecsdrain.StatusActive,
			run:    undrain,
			check: func(t *testing.T, f *fakeECS, err error) {
				require.NoError(t, err)
				require.Empty(t, f.updates)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeECS()
			f.addInstances(1, tt.status)
			if tt.setup != nil {
				tt.setup(f)
			}
			err := tt.run(context.Background(), ecsdrain.New(f), stale)
			tt.check(t, f, err)
		})
	}
}

func startDrain(ctx context.Context, d *ecsdrain.Drainer, ci ecsdrain.ContainerInstance) error {
	return d.StartDrain(ctx, testCluster, ci)
}

func undrain(ctx context.Context, d *ecsdrain.Drainer, ci ecsdrain.ContainerInstance) error {
	return d.Undrain(ctx, testCluster, ci)
}

// task is one task on the draining container instance of TestStatus.
type task struct {
	desired types.DesiredStatus
	last    string
	group   string
}

func TestStatus(t *testing.T) {
	const (
		web    = "service:web"       // REPLICA service
		agent  = "service:log-agent" // DAEMON service
		batch  = "family:nightly-batch"
		gone   = "service:deleted" // service deleted since; DescribeServices answers MISSING
		stop   = types.DesiredStatusStopped
		runnin = types.DesiredStatusRunning
	)
	type want = ecsdrain.DrainStatus
	tests := []struct {
		name  string
		tasks []task
		want  want
	}{
		{
			name:  "C8 DEACTIVATING task with runningTasksCount+pendingTasksCount 0 is not drained",
			tasks: []task{{stop, "DEACTIVATING", web}},
			want:  want{Remaining: 1, ByLastStatus: map[string]int{"DEACTIVATING": 1}},
		},
		{
			name:  "C8 STOPPING task with runningTasksCount+pendingTasksCount 0 is not drained",
			tasks: []task{{stop, "STOPPING", web}},
			want:  want{Remaining: 1, ByLastStatus: map[string]int{"STOPPING": 1}},
		},
		{
			name:  "C8 DEPROVISIONING task with runningTasksCount+pendingTasksCount 0 is not drained",
			tasks: []task{{stop, "DEPROVISIONING", web}},
			want:  want{Remaining: 1, ByLastStatus: map[string]int{"DEPROVISIONING": 1}},
		},
		{
			name:  "C8 all tasks STOPPED is drained",
			tasks: []task{{stop, "STOPPED", web}, {stop, "STOPPED", web}, {stop, "STOPPED", agent}},
			want:  want{Drained: true, ByLastStatus: map[string]int{"STOPPED": 3}},
		},
		{
			name:  "C8 a RUNNING daemon task alone is drained",
			tasks: []task{{runnin, "RUNNING", agent}, {stop, "STOPPED", web}},
			want:  want{Drained: true, RemainingDaemon: 1, ByLastStatus: map[string]int{"RUNNING": 1, "STOPPED": 1}},
		},
		{
			name:  "C8 a PENDING task is not drained",
			tasks: []task{{runnin, "PENDING", web}},
			want:  want{Remaining: 1, ByLastStatus: map[string]int{"PENDING": 1}},
		},
		{
			name:  "a STOPPING replica task beside a RUNNING daemon task is not drained",
			tasks: []task{{runnin, "RUNNING", agent}, {stop, "STOPPING", web}},
			want:  want{Remaining: 1, RemainingDaemon: 1, ByLastStatus: map[string]int{"RUNNING": 1, "STOPPING": 1}},
		},
		{
			name:  "a RUNNING standalone task is not drained",
			tasks: []task{{runnin, "RUNNING", batch}},
			want:  want{Remaining: 1, Standalone: 1, ByLastStatus: map[string]int{"RUNNING": 1}},
		},
		{
			name:  "a RUNNING task of a service ECS no longer knows is not drained",
			tasks: []task{{runnin, "RUNNING", gone}},
			want:  want{Remaining: 1, ByLastStatus: map[string]int{"RUNNING": 1}},
		},
		{
			name: "no task at all is drained",
			want: want{Drained: true, ByLastStatus: map[string]int{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeECS()
			f.services["web"] = types.SchedulingStrategyReplica
			f.services["log-agent"] = types.SchedulingStrategyDaemon
			f.addInstances(2, ecsdrain.StatusDraining)
			for _, tk := range tt.tasks {
				f.addTask(ciARN(1), tk.desired, tk.last, tk.group)
			}
			f.addTask(ciARN(2), runnin, "RUNNING", web) // on another instance: never counted
			// ECS's counters say nothing is left: Status must not rely on them.
			ci := ecsdrain.ContainerInstance{ARN: ciARN(1), EC2InstanceID: ec2ID(1), Status: ecsdrain.StatusDraining, AgentConnected: true}

			got, err := ecsdrain.New(f).Status(context.Background(), testCluster, ci)

			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestStatusListsBothDesiredStatusesOnEveryPage(t *testing.T) {
	f := newFakeECS()
	f.services["web"] = types.SchedulingStrategyReplica
	f.addInstances(1, ecsdrain.StatusDraining)
	for range 230 {
		f.addTask(ciARN(1), types.DesiredStatusStopped, "STOPPED", "service:web")
	}
	f.addTask(ciARN(1), types.DesiredStatusStopped, "STOPPING", "service:web") // on page 3 of the STOPPED listing
	ci := ecsdrain.ContainerInstance{ARN: ciARN(1), Status: ecsdrain.StatusDraining}

	got, err := ecsdrain.New(f).Status(context.Background(), testCluster, ci)

	require.NoError(t, err)
	require.Equal(t, ecsdrain.DrainStatus{Remaining: 1, ByLastStatus: map[string]int{"STOPPED": 230, "STOPPING": 1}}, got)
	listed := map[types.DesiredStatus]int{}
	for _, in := range f.listTasks {
		require.Equal(t, ciARN(1), aws.ToString(in.ContainerInstance))
		listed[in.DesiredStatus]++
	}
	require.Equal(t, map[types.DesiredStatus]int{types.DesiredStatusRunning: 1, types.DesiredStatusStopped: 3}, listed)
	for _, in := range f.describeTasks {
		require.LessOrEqual(t, len(in.Tasks), 100)
	}
}

func TestStatusCachesServiceStrategiesPerCluster(t *testing.T) {
	f := newFakeECS()
	f.addInstances(1, ecsdrain.StatusDraining)
	for i := range 12 { // 12 daemon services: two DescribeServices calls of at most 10
		name := fmt.Sprintf("daemon-%02d", i)
		f.services[name] = types.SchedulingStrategyDaemon
		f.addTask(ciARN(1), types.DesiredStatusRunning, "RUNNING", "service:"+name)
	}
	ci := ecsdrain.ContainerInstance{ARN: ciARN(1), Status: ecsdrain.StatusDraining}
	d := ecsdrain.New(f)

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = d.Status(context.Background(), testCluster, ci) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	described := len(f.describeServices)
	got, err := d.Status(context.Background(), testCluster, ci)

	require.NoError(t, err)
	require.Equal(t, ecsdrain.DrainStatus{Drained: true, RemainingDaemon: 12, ByLastStatus: map[string]int{"RUNNING": 12}}, got)
	require.Equal(t, described, len(f.describeServices), "strategies come from the cache")
	for _, in := range f.describeServices {
		require.LessOrEqual(t, len(in.Services), 10)
		require.Equal(t, testCluster, aws.ToString(in.Cluster))
	}
}

func TestStatusErrors(t *testing.T) {
	apiErr := errors.New("connection reset")
	tests := []struct {
		name string
		op   string
	}{
		{"a ListTasks error is returned wrapped", "ListTasks"},
		{"a DescribeTasks error is returned wrapped", "DescribeTasks"},
		{"a DescribeServices error is returned wrapped", "DescribeServices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeECS()
			f.services["web"] = types.SchedulingStrategyReplica
			f.addInstances(1, ecsdrain.StatusDraining)
			f.addTask(ciARN(1), types.DesiredStatusRunning, "RUNNING", "service:web")
			f.errs[tt.op] = apiErr

			_, err := ecsdrain.New(f).Status(context.Background(), testCluster, ecsdrain.ContainerInstance{ARN: ciARN(1)})

			require.ErrorIs(t, err, apiErr)
			require.ErrorContains(t, err, "checking drain of container instance "+ciARN(1))
		})
	}
}

func TestFindDescribesTheRememberedARNInsteadOfListingTheCluster(t *testing.T) {
	f := newFakeECS()
	f.addInstances(250, ecsdrain.StatusActive)
	d := ecsdrain.New(f)
	_, err := d.FindAll(context.Background(), testCluster)
	require.NoError(t, err)
	listed, described := len(f.listCI), len(f.describeCI)

	ci, err := d.Find(context.Background(), testCluster, ec2ID(230))

	require.NoError(t, err)
	require.Equal(t, ciARN(230), ci.ARN)
	require.Equal(t, listed, len(f.listCI), "no listing")
	require.Len(t, f.describeCI, described+1, "one describe")
	require.Equal(t, []string{ciARN(230)}, f.describeCI[len(f.describeCI)-1].ContainerInstances)

	// Deregistered since: ECS answers MISSING, and Find lists the cluster again.
	f.goneAfterList[ciARN(230)] = true
	_, err = d.Find(context.Background(), testCluster, ec2ID(230))
	require.ErrorIs(t, err, ecsdrain.ErrNotRegistered)
	require.Len(t, f.listCI, listed+3, "the 3 pages listed again")
}

func TestStartDrainFoundTrustsTheJustDescribedStatus(t *testing.T) {
	f := newFakeECS()
	f.addInstances(2, ecsdrain.StatusActive)
	f.instances[1].Status = aws.String(ecsdrain.StatusDraining)
	d := ecsdrain.New(f)
	ctx := context.Background()
	active, err := d.Find(ctx, testCluster, ec2ID(1))
	require.NoError(t, err)
	draining, err := d.Find(ctx, testCluster, ec2ID(2))
	require.NoError(t, err)
	described := len(f.describeCI)

	require.NoError(t, d.StartDrainFound(ctx, testCluster, active))
	require.NoError(t, d.StartDrainFound(ctx, testCluster, draining), "already DRAINING: nothing to do (C17)")
	require.NoError(t, d.UndrainFound(ctx, testCluster, active), "ACTIVE as described: nothing to do")

	require.Equal(t, described, len(f.describeCI), "no second read")
	require.Len(t, f.updates, 1)
	require.Equal(t, types.ContainerInstanceStatusDraining, f.updates[0].Status)
	require.Equal(t, []string{ciARN(1)}, f.updates[0].ContainerInstances)
}

// StillBusy says "not drained" from ECS's task counters alone only while they count more tasks than the daemon
// tasks the last listing of the same DRAINING container instance found: then a task that blocks the drain is
// still running or pending. At or below that count (tasks that are stopping count in neither counter, C8), on
// another status, before any listing and once the instance is set ACTIVE again, it does not answer.
func TestStillBusyTrustsTheTaskCountsOnlyAboveTheLastListingsDaemonTasks(t *testing.T) {
	f := newFakeECS()
	f.addInstances(1, ecsdrain.StatusDraining)
	f.services["log-agent"] = types.SchedulingStrategyDaemon
	f.services["web"] = types.SchedulingStrategyReplica
	f.addTask(ciARN(1), types.DesiredStatusRunning, "RUNNING", "service:log-agent")
	f.addTask(ciARN(1), types.DesiredStatusRunning, "RUNNING", "service:web")
	f.addTask(ciARN(1), types.DesiredStatusStopped, "STOPPING", "service:web")
	f.addTask(ciARN(1), types.DesiredStatusRunning, "RUNNING", "family:nightly-batch")
	d := ecsdrain.New(f)
	ctx := context.Background()
	ci := ecsdrain.ContainerInstance{ARN: ciARN(1), EC2InstanceID: ec2ID(1), Status: ecsdrain.StatusDraining, RunningTasks: 3}

	_, _, ok := d.StillBusy(testCluster, ci)
	require.False(t, ok, "no listing yet: the counters alone prove nothing")

	st, err := d.Status(ctx, testCluster, ci)
	require.NoError(t, err)
	require.Equal(t, 3, st.Remaining)
	require.Equal(t, 1, st.RemainingDaemon)

	remaining, standalone, ok := d.StillBusy(testCluster, ci)
	require.True(t, ok, "3 running or pending, 1 of them at most a daemon task")
	require.Equal(t, 2, remaining, "a lower bound: the count above the daemon tasks")
	require.Equal(t, 1, standalone, "the last listing's standalone tasks")

	ci.RunningTasks, ci.PendingTasks = 1, 1
	_, _, ok = d.StillBusy(testCluster, ci)
	require.True(t, ok, "a pending task counts too")

	ci.PendingTasks = 0
	_, _, ok = d.StillBusy(testCluster, ci)
	require.False(t, ok, "1 counted, 1 daemon task listed: the rest may be stopping (C8), list again")

	ci.RunningTasks = 0
	_, _, ok = d.StillBusy(testCluster, ci)
	require.False(t, ok)

	active := ci
	active.Status, active.RunningTasks = ecsdrain.StatusActive, 5
	_, _, ok = d.StillBusy(testCluster, active)
	require.False(t, ok, "not DRAINING: tasks may be placed on it")

	require.NoError(t, d.UndrainFound(ctx, testCluster, ci))
	ci.RunningTasks = 5
	_, _, ok = d.StillBusy(testCluster, ci)
	require.False(t, ok, "set ACTIVE since the listing: its daemon count is forgotten")
}
