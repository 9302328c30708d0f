package sim

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// ECSClient is the simulated Amazon ECS API. It implements awsapi.ECS.
type ECSClient struct{ s *ecsService }

var _ awsapi.ECS = (*ECSClient)(nil)

func (s *ecsService) findCluster(ref *string) (*cluster, error) {
	name := "default"
	if ref != nil && *ref != "" {
		name = *ref
		if i := strings.LastIndex(name, ":cluster/"); i >= 0 {
			name = name[i+len(":cluster/"):]
		}
	}
	c := s.clusters[name]
	if c == nil {
		return nil, &ecstypes.ClusterNotFoundException{Message: ptr("Cluster not found.")}
	}
	return c, nil
}

func invalidParameter(format string, args ...any) error {
	return &ecstypes.InvalidParameterException{Message: ptr(fmt.Sprintf(format, args...))}
}

func (c *cluster) findCI(ref string) *containerInstance {
	if ci := c.ciByARN[ref]; ci != nil {
		return ci
	}
	for _, ci := range c.cis {
		if ci.id == ref {
			return ci
		}
	}
	return nil
}

// runningTasks counts the tasks on a container instance whose lastStatus is RUNNING.
func (s *ecsService) runningTasks(c *cluster, ci *containerInstance) int {
	n := 0
	for _, t := range c.tasks {
		if t.ci == ci && t.lastStatus == taskRunning {
			n++
		}
	}
	return n
}

func (s *ecsService) describeCI(c *cluster, ci *containerInstance) ecstypes.ContainerInstance {
	var running, pending int32
	for _, t := range c.tasks {
		if t.ci != ci {
			continue
		}
		switch t.lastStatus {
		case taskRunning:
			running++
		case taskPending:
			pending++
		}
	}
	used := int32(0)
	for _, t := range c.tasks {
		if t.ci == ci && !t.isDaemon() && t.lastStatus != taskStopped {
			used++
		}
	}
	per := int32(s.opts.MaxTasksPerInstance)
	regPorts, remPorts := s.portResources(c, ci)
	return ecstypes.ContainerInstance{
		RegisteredResources:  append(taskResources(per), regPorts),
		RemainingResources:   append(taskResources(max(per-used, 0)), remPorts),
		ContainerInstanceArn: ptr(ci.arn),
		CapacityProviderName: s.capacityProviderName(ci),
		Ec2InstanceId:        ptr(ci.ec2ID),
		Status:               ptr(ci.status),
		AgentConnected:       ci.agentConnected,
		RunningTasksCount:    running,
		PendingTasksCount:    pending,
		RegisteredAt:         ptr(ci.registeredAt),
		Version:              ci.version,
		VersionInfo:          &ecstypes.VersionInfo{AgentVersion: ptr("1.89.0"), DockerVersion: ptr("DockerVersion: 25.0.8")},
		Attributes: []ecstypes.Attribute{
			{Name: ptr("ecs.availability-zone"), Value: ptr(ci.az)},
			{Name: ptr("ecs.ami-id"), Value: ptr(ci.imageID)},
			{Name: ptr("ecs.instance-type"), Value: ptr(ci.instanceType)},
			{Name: ptr("ecs.os-type"), Value: ptr("linux")},
		},
	}
}

// ListContainerInstances lists the ARNs (only ARNs, not EC2 instance ids) of a cluster's container instances,
// all but INACTIVE ones unless Status narrows them, in registration order, optionally filtered by a cluster
// query language Filter (subjects ec2InstanceId, agentConnected, registeredAt, runningTasksCount,
// attribute:ecs.availability-zone, attribute:ecs.ami-id, attribute:ecs.instance-type; operators ==, !=, in,
// not_in/!in, their word forms and ordered comparisons; clauses joined by "and"), paged by MaxResults (1-100, default 100) and NextToken.
// Amazon ECS API Reference, "ListContainerInstances"; Developer Guide, "Create expressions to define container
// instances for Amazon ECS tasks" (cluster query language).
// Errors: ClusterNotFoundException, InvalidParameterException.
func (e *ECSClient) ListContainerInstances(ctx context.Context, in *ecs.ListContainerInstancesInput, _ ...func(*ecs.Options)) (*ecs.ListContainerInstancesOutput, error) {
	s := e.s
	unlock, err := s.call(ctx, "ecs:ListContainerInstances")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ecs.ListContainerInstancesInput{}
	}
	c, err := s.findCluster(in.Cluster)
	if err != nil {
		return nil, err
	}
	limit := 100
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 100 {
			return nil, invalidParameter("maxResults must be between 1 and 100.")
		}
		limit = int(*in.MaxResults)
	}
	match := func(*containerInstance) bool { return true }
	if in.Filter != nil && strings.TrimSpace(*in.Filter) != "" {
		f, err := parseCIFilter(*in.Filter, func(ci *containerInstance) int { return s.runningTasks(c, ci) })
		if err != nil {
			return nil, err
		}
		match = f
	}
	start := 0
	if in.NextToken != nil {
		n, err := parseToken(*in.NextToken, "ci")
		if err != nil {
			return nil, invalidParameter("Invalid token %s", *in.NextToken)
		}
		start = n
	}
	out := &ecs.ListContainerInstancesOutput{ContainerInstanceArns: []string{}}
	for _, ci := range c.cis {
		if ci.seq < start || ci.status == ciInactive {
			continue
		}
		if in.Status != "" && string(in.Status) != ci.status {
			continue
		}
		if !match(ci) {
			continue
		}
		if len(out.ContainerInstanceArns) == limit {
			out.NextToken = ptr(makeToken("ci", ci.seq))
			break
		}
		out.ContainerInstanceArns = append(out.ContainerInstanceArns, ci.arn)
	}
	return out, nil
}

var (
	filterCmp  = regexp.MustCompile(`^([A-Za-z0-9:._\-]+)\s*(==|!=|>=|<=|>|<)\s*(.+)$`)
	filterWord = regexp.MustCompile(`^([A-Za-z0-9:._\-]+)\s+(?i:(in|not_in|!in|equals|not_equals|greater_than|greater_than_equal|less_than|less_than_equal))\s+(.+)$`)
	filterAnd  = regexp.MustCompile(`(?i)\s+and\s+`)

	filterAliases = map[string]string{"equals": "==", "not_equals": "!=", "!in": "not_in", "greater_than": ">",
		"greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
)

// parseCIFilter compiles a subset of the ECS cluster query language.
func parseCIFilter(expr string, runningTasks func(*containerInstance) int) (func(*containerInstance) bool, error) {
	var preds []func(*containerInstance) bool
	for _, clause := range filterAnd.Split(strings.TrimSpace(expr), -1) {
		clause = strings.TrimSpace(clause)
		m := filterCmp.FindStringSubmatch(clause)
		if m == nil {
			m = filterWord.FindStringSubmatch(clause)
		}
		if m == nil {
			return nil, invalidParameter("Invalid filter expression: %s", clause)
		}
		subject, op, arg := m[1], strings.ToLower(m[2]), strings.TrimSpace(m[3])
		if alias, ok := filterAliases[op]; ok {
			op = alias
		}
		var values []string
		if strings.HasPrefix(arg, "[") && strings.HasSuffix(arg, "]") {
			for _, v := range strings.Split(arg[1:len(arg)-1], ",") {
				values = append(values, strings.Trim(strings.TrimSpace(v), `"'`))
			}
		} else {
			values = []string{strings.Trim(arg, `"'`)}
		}
		var get func(ci *containerInstance) string
		numeric := false
		switch subject {
		case "runningTasksCount":
			get = func(ci *containerInstance) string { return strconv.Itoa(runningTasks(ci)) }
			numeric = true
		case "ec2InstanceId":
			get = func(ci *containerInstance) string { return ci.ec2ID }
		case "agentConnected":
			get = func(ci *containerInstance) string { return strconv.FormatBool(ci.agentConnected) }
		case "attribute:ecs.availability-zone":
			get = func(ci *containerInstance) string { return ci.az }
		case "attribute:ecs.ami-id":
			get = func(ci *containerInstance) string { return ci.imageID }
		case "attribute:ecs.instance-type":
			get = func(ci *containerInstance) string { return ci.instanceType }
		case "registeredAt":
			get = func(ci *containerInstance) string { return ci.registeredAt.UTC().Format(time.RFC3339) }
		default:
			return nil, invalidParameter("Unsupported filter subject: %s", subject)
		}
		var pred func(*containerInstance) bool
		switch op {
		case "==", "in":
			pred = func(ci *containerInstance) bool { return anyIn([]string{get(ci)}, values) }
		case "!=", "not_in":
			pred = func(ci *containerInstance) bool { return !anyIn([]string{get(ci)}, values) }
		case ">", "<", ">=", "<=":
			v := values[0]
			cmp := func(ci *containerInstance) int { return strings.Compare(get(ci), v) }
			if numeric {
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, invalidParameter("Invalid filter argument for %s: %s", subject, v)
				}
				cmp = func(ci *containerInstance) int { return runningTasks(ci) - n }
			}
			pred = func(ci *containerInstance) bool {
				d := cmp(ci)
				switch op {
				case ">":
					return d > 0
				case "<":
					return d < 0
				case ">=":
					return d >= 0
				}
				return d <= 0
			}
		}
		preds = append(preds, pred)
	}
	return func(ci *containerInstance) bool {
		for _, p := range preds {
			if !p(ci) {
				return false
			}
		}
		return true
	}, nil
}

// DescribeContainerInstances describes up to 100 container instances of a cluster by ARN or id; unknown ones are
// returned as Failures with reason MISSING. Deregistered instances are described with status INACTIVE.
// runningTasksCount counts tasks whose lastStatus is RUNNING and pendingTasksCount those PENDING only.
// Amazon ECS API Reference, "DescribeContainerInstances" and "ContainerInstance".
// Errors: ClusterNotFoundException, InvalidParameterException (more than 100, or none).
func (e *ECSClient) DescribeContainerInstances(ctx context.Context, in *ecs.DescribeContainerInstancesInput, _ ...func(*ecs.Options)) (*ecs.DescribeContainerInstancesOutput, error) {
	s := e.s
	unlock, err := s.call(ctx, "ecs:DescribeContainerInstances")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ecs.DescribeContainerInstancesInput{}
	}
	c, err := s.findCluster(in.Cluster)
	if err != nil {
		return nil, err
	}
	if len(in.ContainerInstances) == 0 {
		return nil, invalidParameter("Container instances cannot be empty.")
	}
	if len(in.ContainerInstances) > 100 {
		return nil, invalidParameter("Container instances cannot be more than 100.")
	}
	out := &ecs.DescribeContainerInstancesOutput{ContainerInstances: []ecstypes.ContainerInstance{}, Failures: []ecstypes.Failure{}}
	for _, ref := range in.ContainerInstances {
		ci := c.findCI(ref)
		if ci == nil {
			out.Failures = append(out.Failures, ecstypes.Failure{Arn: ptr(ref), Reason: ptr("MISSING")})
			continue
		}
		out.ContainerInstances = append(out.ContainerInstances, s.describeCI(c, ci))
	}
	return out, nil
}

// UpdateContainerInstancesState sets up to 10 container instances to DRAINING or back to ACTIVE. A DRAINING
// instance takes no new tasks; its service tasks are replaced elsewhere and then stopped (see reconcileCluster).
// Setting it back to ACTIVE stops the draining. Unknown or deregistered instances are returned as Failures.
// Amazon ECS API Reference, "UpdateContainerInstancesState"; Developer Guide, "Draining Amazon ECS container
// instances". Errors: ClusterNotFoundException, InvalidParameterException.
func (e *ECSClient) UpdateContainerInstancesState(ctx context.Context, in *ecs.UpdateContainerInstancesStateInput, _ ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	s := e.s
	unlock, err := s.call(ctx, "ecs:UpdateContainerInstancesState")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ecs.UpdateContainerInstancesStateInput{}
	}
	c, err := s.findCluster(in.Cluster)
	if err != nil {
		return nil, err
	}
	status := string(in.Status)
	if status != ciActive && status != ciDraining {
		return nil, invalidParameter("Container instance status can be set only to ACTIVE or DRAINING.")
	}
	if len(in.ContainerInstances) == 0 || len(in.ContainerInstances) > 10 {
		return nil, invalidParameter("Container instances must contain between 1 and 10 items.")
	}
	out := &ecs.UpdateContainerInstancesStateOutput{ContainerInstances: []ecstypes.ContainerInstance{}, Failures: []ecstypes.Failure{}}
	var updated []*containerInstance
	for _, ref := range in.ContainerInstances {
		ci := c.findCI(ref)
		if ci == nil || ci.status == ciInactive {
			out.Failures = append(out.Failures, ecstypes.Failure{Arn: ptr(ref), Reason: ptr("MISSING")})
			continue
		}
		s.setContainerInstanceStatus(ci, status)
		updated = append(updated, ci)
	}
	s.settle()
	for _, ci := range updated {
		out.ContainerInstances = append(out.ContainerInstances, s.describeCI(c, ci))
	}
	return out, nil
}

// findService looks a service up by name or ARN.
func (c *cluster) findService(ref string) *service {
	for _, s := range c.services {
		if s.name == ref || s.arn == ref {
			return s
		}
	}
	return nil
}

// ListTasks lists task ARNs of a cluster, narrowed by ContainerInstance, ServiceName, StartedBy and DesiredStatus.
// DesiredStatus defaults to RUNNING, which lists tasks ECS wants running (lastStatus PENDING or RUNNING); tasks
// being stopped and stopped tasks have desiredStatus STOPPED and are listed only with DesiredStatus STOPPED;
// PENDING lists nothing. Paged by MaxResults (1-100, default 100) and NextToken.
// Amazon ECS API Reference, "ListTasks". Errors: ClusterNotFoundException, ServiceNotFoundException,
// InvalidParameterException.
func (e *ECSClient) ListTasks(ctx context.Context, in *ecs.ListTasksInput, _ ...func(*ecs.Options)) (*ecs.ListTasksOutput, error) {
	s := e.s
	unlock, err := s.call(ctx, "ecs:ListTasks")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ecs.ListTasksInput{}
	}
	c, err := s.findCluster(in.Cluster)
	if err != nil {
		return nil, err
	}
	limit := 100
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 100 {
			return nil, invalidParameter("maxResults must be between 1 and 100.")
		}
		limit = int(*in.MaxResults)
	}
	var ci *containerInstance
	if in.ContainerInstance != nil {
		if ci = c.findCI(*in.ContainerInstance); ci == nil {
			return nil, invalidParameter("Invalid container instance: %s", *in.ContainerInstance)
		}
	}
	var svc *service
	if in.ServiceName != nil {
		if svc = c.findService(*in.ServiceName); svc == nil {
			return nil, &ecstypes.ServiceNotFoundException{Message: ptr("Service not found.")}
		}
	}
	desired := string(in.DesiredStatus)
	if desired == "" {
		desired = taskRunning
	}
	start := 0
	if in.NextToken != nil {
		n, err := parseToken(*in.NextToken, "task")
		if err != nil {
			return nil, invalidParameter("Invalid token %s", *in.NextToken)
		}
		start = n
	}
	out := &ecs.ListTasksOutput{TaskArns: []string{}}
	for _, t := range c.tasks {
		if t.seq < start || t.desiredStatus != desired {
			continue
		}
		if ci != nil && t.ci != ci {
			continue
		}
		if svc != nil && t.service != svc {
			continue
		}
		if in.StartedBy != nil && (t.service == nil || t.service.startedBy != *in.StartedBy) {
			continue
		}
		if len(out.TaskArns) == limit {
			out.NextToken = ptr(makeToken("task", t.seq))
			break
		}
		out.TaskArns = append(out.TaskArns, t.arn)
	}
	return out, nil
}

func (s *ecsService) describeTask(c *cluster, t *task) ecstypes.Task {
	out := ecstypes.Task{
		TaskArn:              ptr(t.arn),
		ClusterArn:           ptr(c.arn),
		ContainerInstanceArn: ptr(t.ci.arn),
		LastStatus:           ptr(t.lastStatus),
		DesiredStatus:        ptr(t.desiredStatus),
		LaunchType:           ecstypes.LaunchTypeEc2,
		AvailabilityZone:     ptr(t.ci.az),
		CreatedAt:            ptr(t.createdAt),
		Version:              t.version,
	}
	if !t.isDaemon() {
		out.Cpu, out.Memory = ptr(strconv.Itoa(TaskCPU)), ptr(strconv.Itoa(TaskMemory))
	}
	if t.service == nil {
		// Amazon ECS API Reference, "Task": a standalone task's group is "family:<task definition family>".
		out.Group = ptr("family:standalone")
		out.TaskDefinitionArn = ptr(fmt.Sprintf("arn:aws:ecs:%s:%s:task-definition/standalone:1", s.opts.Region, s.opts.AccountID))
		if t.startedBy != "" {
			out.StartedBy = ptr(t.startedBy)
		}
	}
	if t.service != nil {
		out.Group = ptr("service:" + t.service.name)
		out.StartedBy = ptr(t.service.startedBy)
		out.TaskDefinitionArn = ptr(fmt.Sprintf("arn:aws:ecs:%s:%s:task-definition/%s:1", s.opts.Region, s.opts.AccountID, t.service.name))
		if nb := t.service.networkBindings(); nb != nil {
			out.Containers = []ecstypes.Container{{Name: ptr(t.service.name), TaskArn: ptr(t.arn), LastStatus: ptr(t.lastStatus), NetworkBindings: nb}}
		}
	}
	if !t.startedAt.IsZero() {
		out.StartedAt = ptr(t.startedAt)
	}
	if !t.stoppingAt.IsZero() {
		out.StoppingAt = ptr(t.stoppingAt)
		out.StoppedReason = ptr(t.stoppedReason)
		out.StopCode = ecstypes.TaskStopCodeServiceSchedulerInitiated
	}
	if !t.stoppedAt.IsZero() {
		out.StoppedAt = ptr(t.stoppedAt)
		out.ExecutionStoppedAt = ptr(t.stoppedAt)
	}
	return out
}

// DescribeTasks describes up to 100 tasks of a cluster by ARN or id (lastStatus, desiredStatus, group
// "service:<name>", containerInstanceArn, startedBy); unknown ones are Failures with reason MISSING.
// Amazon ECS API Reference, "DescribeTasks". Errors: ClusterNotFoundException, InvalidParameterException.
func (e *ECSClient) DescribeTasks(ctx context.Context, in *ecs.DescribeTasksInput, _ ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error) {
	s := e.s
	unlock, err := s.call(ctx, "ecs:DescribeTasks")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ecs.DescribeTasksInput{}
	}
	c, err := s.findCluster(in.Cluster)
	if err != nil {
		return nil, err
	}
	if len(in.Tasks) == 0 {
		return nil, invalidParameter("Tasks cannot be empty.")
	}
	if len(in.Tasks) > 100 {
		return nil, invalidParameter("Tasks cannot be more than 100.")
	}
	out := &ecs.DescribeTasksOutput{Tasks: []ecstypes.Task{}, Failures: []ecstypes.Failure{}}
	for _, ref := range in.Tasks {
		t := c.taskByARN[ref]
		if t == nil {
			for _, cand := range c.tasks {
				if cand.id == ref {
					t = cand
				}
			}
		}
		if t == nil {
			out.Failures = append(out.Failures, ecstypes.Failure{Arn: ptr(ref), Reason: ptr("MISSING")})
			continue
		}
		out.Tasks = append(out.Tasks, s.describeTask(c, t))
	}
	return out, nil
}

// DescribeServices describes up to 10 services of a cluster by name or ARN (desired, running and pending counts,
// scheduling strategy, deployment configuration); unknown ones are Failures with reason MISSING.
// Amazon ECS API Reference, "DescribeServices". Errors: ClusterNotFoundException, InvalidParameterException.
func (e *ECSClient) DescribeServices(ctx context.Context, in *ecs.DescribeServicesInput, _ ...func(*ecs.Options)) (*ecs.DescribeServicesOutput, error) {
	s := e.s
	unlock, err := s.call(ctx, "ecs:DescribeServices")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ecs.DescribeServicesInput{}
	}
	c, err := s.findCluster(in.Cluster)
	if err != nil {
		return nil, err
	}
	if len(in.Services) == 0 {
		return nil, invalidParameter("Services cannot be empty.")
	}
	if len(in.Services) > 10 {
		return nil, invalidParameter("Services cannot be more than 10.")
	}
	out := &ecs.DescribeServicesOutput{Services: []ecstypes.Service{}, Failures: []ecstypes.Failure{}}
	for _, ref := range in.Services {
		svc := c.findService(ref)
		if svc == nil {
			out.Failures = append(out.Failures, ecstypes.Failure{Arn: ptr(ref), Reason: ptr("MISSING")})
			continue
		}
		out.Services = append(out.Services, s.describeService(c, svc))
	}
	return out, nil
}

func (s *ecsService) describeService(c *cluster, svc *service) ecstypes.Service {
	var running, pending int32
	for _, t := range c.tasks {
		if t.service != svc {
			continue
		}
		switch t.lastStatus {
		case taskRunning:
			running++
		case taskPending:
			pending++
		}
	}
	desired := int32(svc.desired)
	strategy := ecstypes.SchedulingStrategyReplica
	cfg := &ecstypes.DeploymentConfiguration{MinimumHealthyPercent: ptr(int32(svc.minHealthy())), MaximumPercent: ptr(int32(svc.maxPercent()))}
	if svc.daemon {
		strategy = ecstypes.SchedulingStrategyDaemon
		cfg = &ecstypes.DeploymentConfiguration{MinimumHealthyPercent: ptr(int32(0)), MaximumPercent: ptr(int32(100))}
		desired = 0
		for _, ci := range c.cis {
			if ci.status == ciActive && ci.agentConnected {
				desired++
			}
		}
	}
	taskDef := fmt.Sprintf("arn:aws:ecs:%s:%s:task-definition/%s:1", s.opts.Region, s.opts.AccountID, svc.name)
	return ecstypes.Service{
		ServiceName:                 ptr(svc.name),
		ServiceArn:                  ptr(svc.arn),
		ClusterArn:                  ptr(c.arn),
		Status:                      ptr("ACTIVE"),
		DesiredCount:                desired,
		RunningCount:                running,
		PendingCount:                pending,
		LaunchType:                  svc.launchType(),
		CapacityProviderStrategy:    svc.capacityProviderStrategy(),
		SchedulingStrategy:          strategy,
		DeploymentConfiguration:     cfg,
		PlacementConstraints:        svc.placementConstraints(),
		PlacementStrategy:           svc.placementStrategy(),
		AvailabilityZoneRebalancing: svc.azRebalancing(),
		TaskDefinition:              ptr(taskDef),
		CreatedAt:                   ptr(svc.createdAt),
		Deployments: []ecstypes.Deployment{{
			Id:             ptr("ecs-svc/" + svc.startedBy[len("ecs-svc/"):]),
			Status:         ptr("PRIMARY"),
			DesiredCount:   desired,
			RunningCount:   running,
			PendingCount:   pending,
			TaskDefinition: ptr(taskDef),
			LaunchType:     ecstypes.LaunchTypeEc2,
			CreatedAt:      ptr(svc.createdAt),
			UpdatedAt:      ptr(svc.createdAt),
			RolloutState:   ecstypes.DeploymentRolloutStateCompleted,
		}},
	}
}
