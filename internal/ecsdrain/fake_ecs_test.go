package ecsdrain_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

var _ awsapi.ECS = (*fakeECS)(nil)

const testCluster = "prod"

// fakeECS is one ECS cluster held in memory. It records every input and enforces the limits of the real API:
// ListContainerInstances and ListTasks page with maxResults 1..100 (default 100) and nextToken;
// DescribeContainerInstances and DescribeTasks take 1..100 ARNs, DescribeServices 1..10 names,
// UpdateContainerInstancesState 1..10 ARNs; ListTasks filters by desiredStatus, RUNNING when unset; unknown
// resources come back as Failures with reason MISSING.
type fakeECS struct {
	mu sync.Mutex

	instances []types.ContainerInstance // in listing order
	tasks     []types.Task
	services  map[string]types.SchedulingStrategy // by service name

	// goneAfterList holds container instance ARNs that are listed but describe as MISSING (deregistered).
	goneAfterList map[string]bool
	// describeFailures and updateFailures inject a Failure for an ARN.
	describeFailures map[string]types.Failure
	updateFailures   map[string]types.Failure
	// errs injects an error for a whole operation, by operation name.
	errs map[string]error

	listCI           []ecs.ListContainerInstancesInput
	describeCI       []ecs.DescribeContainerInstancesInput
	updates          []ecs.UpdateContainerInstancesStateInput
	listTasks        []ecs.ListTasksInput
	describeTasks    []ecs.DescribeTasksInput
	describeServices []ecs.DescribeServicesInput
}

func newFakeECS() *fakeECS {
	return &fakeECS{
		services:         map[string]types.SchedulingStrategy{},
		goneAfterList:    map[string]bool{},
		describeFailures: map[string]types.Failure{},
		updateFailures:   map[string]types.Failure{},
		errs:             map[string]error{},
	}
}

func ciARN(n int) string {
	return fmt.Sprintf("arn:aws:ecs:eu-west-1:123456789012:container-instance/%s/%032d", testCluster, n)
}

func ec2ID(n int) string { return fmt.Sprintf("i-%017d", n) }

func taskARN(n int) string {
	return fmt.Sprintf("arn:aws:ecs:eu-west-1:123456789012:task/%s/%032d", testCluster, n)
}

// addInstances registers n container instances numbered from 1: ARN ciARN(i), EC2 instance ec2ID(i).
func (f *fakeECS) addInstances(n int, status string) {
	for i := 1; i <= n; i++ {
		f.instances = append(f.instances, types.ContainerInstance{
			ContainerInstanceArn: aws.String(ciARN(len(f.instances) + 1)),
			Ec2InstanceId:        aws.String(ec2ID(len(f.instances) + 1)),
			Status:               aws.String(status),
			AgentConnected:       true,
		})
	}
}

// addTask places a task on the container instance ciARN; group is "service:<name>" or "family:<name>".
func (f *fakeECS) addTask(onCI string, desired types.DesiredStatus, last, group string) {
	f.tasks = append(f.tasks, types.Task{
		TaskArn:              aws.String(taskARN(len(f.tasks) + 1)),
		ContainerInstanceArn: aws.String(onCI),
		DesiredStatus:        aws.String(string(desired)),
		LastStatus:           aws.String(last),
		Group:                aws.String(group),
	})
}

func invalidParameter(format string, args ...any) error {
	return &types.InvalidParameterException{Message: aws.String(fmt.Sprintf(format, args...))}
}

func (f *fakeECS) checkCluster(cluster *string) error {
	if aws.ToString(cluster) != testCluster {
		return &types.ClusterNotFoundException{Message: aws.String("Cluster not found.")}
	}
	return nil
}

func checkCount(op string, n, limit int) error {
	if n < 1 || n > limit {
		return invalidParameter("%s takes 1 to %d items, got %d", op, limit, n)
	}
	return nil
}

// page returns the page of items that starts at token, maxResults long (default and maximum 100).
func page[T any](items []T, maxResults *int32, token *string) ([]T, *string, error) {
	size := 100
	if maxResults != nil {
		if *maxResults < 1 || *maxResults > 100 {
			return nil, nil, invalidParameter("maxResults must be 1..100, got %d", *maxResults)
		}
		size = int(*maxResults)
	}
	start := 0
	if token != nil {
		n, err := strconv.Atoi(*token)
		if err != nil || n < 0 || n > len(items) {
			return nil, nil, invalidParameter("invalid nextToken %q", *token)
		}
		start = n
	}
	end := min(start+size, len(items))
	var next *string
	if end < len(items) {
		next = aws.String(strconv.Itoa(end))
	}
	return items[start:end], next, nil
}

func (f *fakeECS) find(arn string) *types.ContainerInstance {
	for i := range f.instances {
		if aws.ToString(f.instances[i].ContainerInstanceArn) == arn {
			return &f.instances[i]
		}
	}
	return nil
}

func missingFailure(arn string) types.Failure {
	return types.Failure{Arn: aws.String(arn), Reason: aws.String("MISSING")}
}

func (f *fakeECS) ListContainerInstances(_ context.Context, in *ecs.ListContainerInstancesInput, _ ...func(*ecs.Options)) (*ecs.ListContainerInstancesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listCI = append(f.listCI, *in)
	if err := f.errs["ListContainerInstances"]; err != nil {
		return nil, err
	}
	if err := f.checkCluster(in.Cluster); err != nil {
		return nil, err
	}
	if in.Filter != nil {
		return nil, invalidParameter("fake does not evaluate cluster query language filters")
	}
	var arns []string
	for _, ci := range f.instances {
		if in.Status == "" || string(in.Status) == aws.ToString(ci.Status) {
			arns = append(arns, aws.ToString(ci.ContainerInstanceArn))
		}
	}
	pg, next, err := page(arns, in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	return &ecs.ListContainerInstancesOutput{ContainerInstanceArns: pg, NextToken: next}, nil
}

func (f *fakeECS) DescribeContainerInstances(_ context.Context, in *ecs.DescribeContainerInstancesInput, _ ...func(*ecs.Options)) (*ecs.DescribeContainerInstancesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := *in
	rec.ContainerInstances = slices.Clone(in.ContainerInstances)
	f.describeCI = append(f.describeCI, rec)
	if err := f.errs["DescribeContainerInstances"]; err != nil {
		return nil, err
	}
	if err := f.checkCluster(in.Cluster); err != nil {
		return nil, err
	}
	if err := checkCount("DescribeContainerInstances", len(in.ContainerInstances), 100); err != nil {
		return nil, err
	}
	out := &ecs.DescribeContainerInstancesOutput{}
	for _, arn := range in.ContainerInstances {
		if fl, ok := f.describeFailures[arn]; ok {
			out.Failures = append(out.Failures, fl)
			continue
		}
		ci := f.find(arn)
		if ci == nil || f.goneAfterList[arn] {
			out.Failures = append(out.Failures, missingFailure(arn))
			continue
		}
		out.ContainerInstances = append(out.ContainerInstances, *ci)
	}
	return out, nil
}

func (f *fakeECS) UpdateContainerInstancesState(_ context.Context, in *ecs.UpdateContainerInstancesStateInput, _ ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := *in
	rec.ContainerInstances = slices.Clone(in.ContainerInstances)
	f.updates = append(f.updates, rec)
	if err := f.errs["UpdateContainerInstancesState"]; err != nil {
		return nil, err
	}
	if err := f.checkCluster(in.Cluster); err != nil {
		return nil, err
	}
	if err := checkCount("UpdateContainerInstancesState", len(in.ContainerInstances), 10); err != nil {
		return nil, err
	}
	if in.Status != types.ContainerInstanceStatusActive && in.Status != types.ContainerInstanceStatusDraining {
		return nil, invalidParameter("status must be ACTIVE or DRAINING, got %q", in.Status)
	}
	out := &ecs.UpdateContainerInstancesStateOutput{}
	for _, arn := range in.ContainerInstances {
		if fl, ok := f.updateFailures[arn]; ok {
			out.Failures = append(out.Failures, fl)
			continue
		}
		ci := f.find(arn)
		if ci == nil {
			out.Failures = append(out.Failures, missingFailure(arn))
			continue
		}
		ci.Status = aws.String(string(in.Status))
		out.ContainerInstances = append(out.ContainerInstances, *ci)
	}
	return out, nil
}

func (f *fakeECS) ListTasks(_ context.Context, in *ecs.ListTasksInput, _ ...func(*ecs.Options)) (*ecs.ListTasksOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listTasks = append(f.listTasks, *in)
	if err := f.errs["ListTasks"]; err != nil {
		return nil, err
	}
	if err := f.checkCluster(in.Cluster); err != nil {
		return nil, err
	}
	desired := in.DesiredStatus
	if desired == "" {
		desired = types.DesiredStatusRunning // the API's default filter
	}
	var arns []string
	for _, t := range f.tasks {
		if in.ContainerInstance != nil && aws.ToString(t.ContainerInstanceArn) != *in.ContainerInstance {
			continue
		}
		if aws.ToString(t.DesiredStatus) != string(desired) {
			continue
		}
		arns = append(arns, aws.ToString(t.TaskArn))
	}
	pg, next, err := page(arns, in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	return &ecs.ListTasksOutput{TaskArns: pg, NextToken: next}, nil
}

func (f *fakeECS) DescribeTasks(_ context.Context, in *ecs.DescribeTasksInput, _ ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := *in
	rec.Tasks = slices.Clone(in.Tasks)
	f.describeTasks = append(f.describeTasks, rec)
	if err := f.errs["DescribeTasks"]; err != nil {
		return nil, err
	}
	if err := f.checkCluster(in.Cluster); err != nil {
		return nil, err
	}
	if err := checkCount("DescribeTasks", len(in.Tasks), 100); err != nil {
		return nil, err
	}
	out := &ecs.DescribeTasksOutput{}
	for _, arn := range in.Tasks {
		i := slices.IndexFunc(f.tasks, func(t types.Task) bool { return aws.ToString(t.TaskArn) == arn })
		if i < 0 {
			out.Failures = append(out.Failures, missingFailure(arn))
			continue
		}
		out.Tasks = append(out.Tasks, f.tasks[i])
	}
	return out, nil
}

func (f *fakeECS) DescribeServices(_ context.Context, in *ecs.DescribeServicesInput, _ ...func(*ecs.Options)) (*ecs.DescribeServicesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := *in
	rec.Services = slices.Clone(in.Services)
	f.describeServices = append(f.describeServices, rec)
	if err := f.errs["DescribeServices"]; err != nil {
		return nil, err
	}
	if err := f.checkCluster(in.Cluster); err != nil {
		return nil, err
	}
	if err := checkCount("DescribeServices", len(in.Services), 10); err != nil {
		return nil, err
	}
	out := &ecs.DescribeServicesOutput{}
	for _, name := range in.Services {
		strategy, ok := f.services[name]
		if !ok {
			out.Failures = append(out.Failures, missingFailure(name))
			continue
		}
		out.Services = append(out.Services, types.Service{
			ServiceName:        aws.String(name),
			ServiceArn:         aws.String("arn:aws:ecs:eu-west-1:123456789012:service/" + testCluster + "/" + name),
			SchedulingStrategy: strategy,
		})
	}
	return out, nil
}
