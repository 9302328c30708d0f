package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// AutoScalingClient is the simulated Amazon EC2 Auto Scaling API. It implements awsapi.AutoScaling.
type AutoScalingClient struct{ s *autoScalingService }

var _ awsapi.AutoScaling = (*AutoScalingClient)(nil)

func (as *autoScalingService) describeGroup(g *group) astypes.AutoScalingGroup {
	out := astypes.AutoScalingGroup{
		AutoScalingGroupName:             ptr(g.name),
		AutoScalingGroupARN:              ptr(g.arn),
		MinSize:                          ptr(g.min),
		MaxSize:                          ptr(g.max),
		DesiredCapacity:                  ptr(g.desired),
		AvailabilityZones:                append([]string(nil), g.azs...),
		CreatedTime:                      ptr(g.createdAt),
		DefaultCooldown:                  ptr(int32(300)),
		HealthCheckType:                  ptr("EC2"),
		HealthCheckGracePeriod:           ptr(int32(g.healthCheckGrace / time.Second)),
		NewInstancesProtectedFromScaleIn: ptr(g.newProtected),
		TerminationPolicies:              []string{"Default"},
		ServiceLinkedRoleARN:             ptr(fmt.Sprintf("arn:aws:iam::%s:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling", as.opts.AccountID)),
	}
	t := as.ec2.template(g.ltID)
	spec := &astypes.LaunchTemplateSpecification{LaunchTemplateId: ptr(g.ltID), Version: ptr(g.ltVersion)}
	if t != nil {
		spec.LaunchTemplateName = ptr(t.name)
	}
	if g.defaultWarmup != nil {
		out.DefaultInstanceWarmup = ptr(int32(*g.defaultWarmup / time.Second))
	}
	if g.mixed {
		overrides := overridesOf(g.overrides)
		if g.instanceRequirements {
			overrides = []astypes.LaunchTemplateOverrides{{InstanceRequirements: &astypes.InstanceRequirements{
				VCpuCount: &astypes.VCpuCountRequest{Min: ptr(int32(2))}, MemoryMiB: &astypes.MemoryMiBRequest{Min: ptr(int32(4096))}}}}
		}
		out.MixedInstancesPolicy = &astypes.MixedInstancesPolicy{
			LaunchTemplate: &astypes.LaunchTemplate{LaunchTemplateSpecification: spec, Overrides: overrides},
			InstancesDistribution: &astypes.InstancesDistribution{
				OnDemandAllocationStrategy:          ptr("prioritized"),
				OnDemandBaseCapacity:                ptr(int32(0)),
				OnDemandPercentageAboveBaseCapacity: ptr(int32(100)),
				SpotAllocationStrategy:              ptr("lowest-price"),
			},
		}
	} else {
		out.LaunchTemplate = spec
	}
	for _, k := range sortedKeys(g.tags) {
		out.Tags = append(out.Tags, astypes.TagDescription{Key: ptr(k), Value: ptr(g.tags[k]), PropagateAtLaunch: ptr(true),
			ResourceId: ptr(g.name), ResourceType: ptr("auto-scaling-group")})
	}
	out.Instances = []astypes.Instance{}
	for _, id := range g.instances {
		inst := as.ec2.instance(id)
		if inst.state == string(astypes.LifecycleStateTerminated) {
			continue
		}
		out.Instances = append(out.Instances, inst.groupMember())
	}
	as.describeLaunchConfigurationGroup(g, &out) // groups on a launch configuration (launchconfig.go)
	as.describeWarmPoolOf(g, &out)               // warmpool.go
	return out
}

// groupMatches applies DescribeAutoScalingGroups filters: tag-key, tag-value and tag:<key>, each with Values;
// filters are ANDed, values ORed.
// Amazon EC2 Auto Scaling API Reference, "DescribeAutoScalingGroups" and "Filter".
func groupMatches(g *group, filters []astypes.Filter) (bool, error) {
	for _, f := range filters {
		if f.Name == nil {
			return false, apiError("ValidationError", "1 validation error detected: Value null at 'filters.member.name' failed to satisfy constraint: Member must not be null")
		}
		var have []string
		switch name := *f.Name; {
		case name == "tag-key":
			have = sortedKeys(g.tags)
		case name == "tag-value":
			for _, k := range sortedKeys(g.tags) {
				have = append(have, g.tags[k])
			}
		case len(name) > 4 && name[:4] == "tag:":
			if v, ok := g.tags[name[4:]]; ok {
				have = []string{v}
			}
		default:
			return false, apiError("ValidationError", "Filter type %s is not correct. Allowed Filter types are: auto-scaling-group key value propagate-at-launch tag-key tag-value", name)
		}
		if !anyIn(have, f.Values) {
			return false, nil
		}
	}
	return true, nil
}

// DescribeAutoScalingGroups describes groups, all or those named in AutoScalingGroupNames, narrowed by Filters
// (tag-key, tag-value, tag:<key>), in name order, paged by MaxRecords (default 50, at most 100) and NextToken.
// Instances lists every instance not yet Terminated with its lifecycle state, health, Availability Zone,
// scale-in protection and the launch template version it was launched from.
// Amazon EC2 Auto Scaling API Reference, "DescribeAutoScalingGroups". Errors: ValidationError.
func (c *AutoScalingClient) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:DescribeAutoScalingGroups")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &autoscaling.DescribeAutoScalingGroupsInput{}
	}
	limit := int32(50)
	if in.MaxRecords != nil {
		if *in.MaxRecords < 1 || *in.MaxRecords > 100 {
			return nil, apiError("ValidationError", "1 validation error detected: Value '%d' at 'maxRecords' failed to satisfy constraint: Member must have value between 1 and 100", *in.MaxRecords)
		}
		limit = *in.MaxRecords
	}
	names := as.groupNames()
	if len(in.AutoScalingGroupNames) > 0 {
		want := map[string]bool{}
		for _, n := range in.AutoScalingGroupNames {
			want[n] = true
		}
		var kept []string
		for _, n := range names {
			if want[n] {
				kept = append(kept, n)
			}
		}
		names = kept
	}
	from := ""
	if in.NextToken != nil {
		s, ok := cutPrefix(*in.NextToken, "asg-")
		if !ok {
			return nil, apiError("ValidationError", "The token '%s' is invalid.", *in.NextToken)
		}
		from = s
	}
	out := &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: []astypes.AutoScalingGroup{}}
	for _, n := range names {
		if n < from {
			continue
		}
		g := as.group(n)
		ok, err := groupMatches(g, in.Filters)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if int32(len(out.AutoScalingGroups)) == limit {
			out.NextToken = ptr("asg-" + n)
			break
		}
		out.AutoScalingGroups = append(out.AutoScalingGroups, as.describeGroup(g))
	}
	return out, nil
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return "", false
	}
	return s[len(prefix):], true
}

// templateRef validates a LaunchTemplateSpecification from a request and returns the template id and version.
func (as *autoScalingService) templateRef(spec *astypes.LaunchTemplateSpecification) (string, string, error) {
	if spec == nil || (spec.LaunchTemplateId == nil && spec.LaunchTemplateName == nil) {
		return "", "", apiError("ValidationError", "You must use a valid fully-formed launch template. A launch template ID or name must be specified.")
	}
	var t *launchTemplate
	if spec.LaunchTemplateId != nil {
		t = as.ec2.template(*spec.LaunchTemplateId)
		if t == nil {
			return "", "", apiError("ValidationError", "You must use a valid fully-formed launch template. The specified launch template, with template ID %s, does not exist.", *spec.LaunchTemplateId)
		}
	} else {
		t = as.ec2.templateNamed(*spec.LaunchTemplateName)
		if t == nil {
			return "", "", apiError("ValidationError", "You must use a valid fully-formed launch template. The specified launch template, with template name %s, does not exist.", *spec.LaunchTemplateName)
		}
	}
	version := "$Default"
	if spec.Version != nil && *spec.Version != "" {
		version = *spec.Version
	}
	if _, err := as.validateTemplateRef(t.id, version); err != nil {
		return "", "", err
	}
	return t.id, version, nil
}

// UpdateAutoScalingGroup changes only the fields it is given: MinSize, MaxSize, DesiredCapacity, LaunchTemplate
// or MixedInstancesPolicy (one replaces the other), AvailabilityZones, NewInstancesProtectedFromScaleIn. Given
// a new MinSize above the desired capacity and no DesiredCapacity, desired rises to MinSize; given a new MaxSize
// below it, desired falls to MaxSize. A changed launch template applies to instances launched afterwards;
// running instances keep theirs.
// Amazon EC2 Auto Scaling API Reference, "UpdateAutoScalingGroup". Errors: ValidationError.
func (c *AutoScalingClient) UpdateAutoScalingGroup(ctx context.Context, in *autoscaling.UpdateAutoScalingGroupInput, _ ...func(*autoscaling.Options)) (*autoscaling.UpdateAutoScalingGroupOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:UpdateAutoScalingGroup")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	g := as.group(*in.AutoScalingGroupName)
	if g == nil {
		return nil, groupNotFound(*in.AutoScalingGroupName)
	}
	minSize, maxSize, desired := g.min, g.max, g.desired
	if in.MinSize != nil {
		minSize = *in.MinSize
	}
	if in.MaxSize != nil {
		maxSize = *in.MaxSize
	}
	if in.DesiredCapacity != nil {
		desired = *in.DesiredCapacity
	} else {
		if in.MinSize != nil && minSize > desired {
			desired = minSize
		}
		if in.MaxSize != nil && maxSize < desired {
			desired = maxSize
		}
	}
	since, fromMax := len(as.terminations), g.max
	if err := validateCapacity(minSize, maxSize, desired); err != nil {
		as.recordWrite(CapacityWrite{Group: g.name, By: CallerAPI, Op: OpUpdateAutoScalingGroup, From: g.desired, To: g.desired, MaxFrom: fromMax, MaxTo: fromMax}, since)
		return nil, err
	}
	ltID, ltVersion, mixed := g.ltID, g.ltVersion, g.mixed
	// User Guide, instance refresh with a desired configuration: while such a refresh is active, the settings
	// the desired configuration sets (launch template, mixed instances policy) cannot be updated (refresh.go).
	if r := as.activeRefresh(g); r != nil && r.hasDesired && (in.LaunchTemplate != nil || in.MixedInstancesPolicy != nil) {
		return nil, apiError("ValidationError", "An instance refresh with a desired configuration is active: the launch template and mixed instances policy of group %s cannot be updated until it ends.", g.name)
	}
	switch {
	case in.LaunchTemplate != nil && in.MixedInstancesPolicy != nil:
		return nil, apiError("ValidationError", "Valid requests must contain either LaunchTemplate, LaunchConfigurationName, InstanceId or MixedInstancesPolicy parameter.")
	case in.LaunchTemplate != nil:
		id, v, err := as.templateRef(in.LaunchTemplate)
		if err != nil {
			return nil, err
		}
		ltID, ltVersion, mixed = id, v, false
	case in.MixedInstancesPolicy != nil:
		if in.MixedInstancesPolicy.LaunchTemplate != nil {
			id, v, err := as.templateRef(in.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification)
			if err != nil {
				return nil, err
			}
			ltID, ltVersion, mixed = id, v, true
			if o := in.MixedInstancesPolicy.LaunchTemplate.Overrides; o != nil {
				g.overrides = g.overrides[:0]
				for _, x := range o {
					if x.InstanceType != nil {
						g.overrides = append(g.overrides, *x.InstanceType)
					}
				}
			}
		} else if !g.mixed {
			return nil, apiError("ValidationError", "You must specify a launch template in the MixedInstancesPolicy.")
		}
	}
	from := g.desired
	g.min, g.max, g.desired = minSize, maxSize, desired
	as.recordDesired(g, from, CallerAPI)
	g.ltID, g.ltVersion, g.mixed = ltID, ltVersion, mixed
	if len(in.AvailabilityZones) > 0 {
		g.azs = append([]string(nil), in.AvailabilityZones...)
	}
	if in.NewInstancesProtectedFromScaleIn != nil {
		g.newProtected = *in.NewInstancesProtectedFromScaleIn
	}
	// API Reference, UpdateAutoScalingGroup: DefaultInstanceWarmup -1 removes the value set before;
	// HealthCheckGracePeriod in seconds.
	if w := in.DefaultInstanceWarmup; w != nil {
		if *w < 0 {
			g.defaultWarmup = nil
		} else {
			d := time.Duration(*w) * time.Second
			g.defaultWarmup = &d
		}
	}
	if p := in.HealthCheckGracePeriod; p != nil {
		g.healthCheckGrace = time.Duration(*p) * time.Second
	}
	as.settle()
	as.recordWrite(CapacityWrite{Group: g.name, By: CallerAPI, Op: OpUpdateAutoScalingGroup, From: from, To: g.desired, MaxFrom: fromMax, MaxTo: g.max, Accepted: true}, since)
	return &autoscaling.UpdateAutoScalingGroupOutput{}, nil
}

// SetDesiredCapacity sets a group's desired capacity; Auto Scaling then launches or terminates instances (by the
// termination policy) to match.
// Amazon EC2 Auto Scaling API Reference, "SetDesiredCapacity". Errors: ValidationError (outside [min, max],
// unknown group).
func (c *AutoScalingClient) SetDesiredCapacity(ctx context.Context, in *autoscaling.SetDesiredCapacityInput, _ ...func(*autoscaling.Options)) (*autoscaling.SetDesiredCapacityOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:SetDesiredCapacity")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil || in.DesiredCapacity == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'desiredCapacity' failed to satisfy constraint: Member must not be null")
	}
	if err := as.writeDesired(*in.AutoScalingGroupName, *in.DesiredCapacity, CallerAPI); err != nil {
		return nil, err
	}
	return &autoscaling.SetDesiredCapacityOutput{}, nil
}

// TerminateInstanceInAutoScalingGroup terminates one instance of a group. With ShouldDecrementDesiredCapacity
// the desired capacity drops by one (ValidationError when that would go below the group's minimum); without it
// Auto Scaling launches a replacement. An instance already terminating is not terminated twice: the call
// returns the activity of the running termination.
// Amazon EC2 Auto Scaling API Reference, "TerminateInstanceInAutoScalingGroup". Errors: ValidationError
// ("Instance Id not found - No managed instance found for instance ID: i-...", min size violation).
func (c *AutoScalingClient) TerminateInstanceInAutoScalingGroup(ctx context.Context, in *autoscaling.TerminateInstanceInAutoScalingGroupInput, _ ...func(*autoscaling.Options)) (*autoscaling.TerminateInstanceInAutoScalingGroupOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:TerminateInstanceInAutoScalingGroup")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.InstanceId == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'instanceId' failed to satisfy constraint: Member must not be null")
	}
	if in.ShouldDecrementDesiredCapacity == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'shouldDecrementDesiredCapacity' failed to satisfy constraint: Member must not be null")
	}
	inst := as.ec2.instance(*in.InstanceId)
	if inst == nil || inst.state == string(astypes.LifecycleStateTerminated) {
		return nil, apiError("ValidationError", "Instance Id not found - No managed instance found for instance ID: %s", *in.InstanceId)
	}
	g := as.group(inst.group)
	if isTerminating(inst.state) {
		return &autoscaling.TerminateInstanceInAutoScalingGroupOutput{Activity: as.activity(inst, g, g.desired, g.desired)}, nil
	}
	from, since := g.desired, len(as.terminations)
	write := CapacityWrite{Group: g.name, By: CallerAPI, Op: OpTerminateInstance, From: from, To: from, MaxFrom: g.max, MaxTo: g.max,
		InstanceID: inst.id, Decrement: *in.ShouldDecrementDesiredCapacity}
	if *in.ShouldDecrementDesiredCapacity && !as.inWarmPool(inst) { // a pool instance is no part of desired capacity
		if g.desired-1 < g.min {
			as.recordWrite(write, since)
			return nil, apiError("ValidationError", "Currently, desiredSize equals minSize (%d). Terminating instance without replacement will violate group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group's min size.", g.min)
		}
		g.desired--
		as.recordDesired(g, from, CallerAPI)
	}
	act := as.activity(inst, g, from, g.desired)
	as.beginTerminate(inst, CauseAPI)
	as.settle()
	write.To, write.Accepted = g.desired, true
	as.recordWrite(write, since)
	return &autoscaling.TerminateInstanceInAutoScalingGroupOutput{Activity: act}, nil
}

// activity describes the scaling activity of an instance's termination.
func (as *autoScalingService) activity(inst *instance, g *group, from, to int32) *astypes.Activity {
	cause := fmt.Sprintf("At %s instance %s was taken out of service in response to a user request.", as.now().UTC().Format(time.RFC3339), inst.id)
	if from != to {
		cause = fmt.Sprintf("At %s instance %s was taken out of service in response to a user request, shrinking the capacity from %d to %d.", as.now().UTC().Format(time.RFC3339), inst.id, from, to)
	}
	return &astypes.Activity{
		ActivityId:           ptr(as.uuid()),
		AutoScalingGroupName: ptr(g.name),
		AutoScalingGroupARN:  ptr(g.arn),
		Cause:                ptr(cause),
		Description:          ptr("Terminating EC2 instance: " + inst.id),
		Details:              ptr(fmt.Sprintf(`{"Availability Zone":"%s"}`, inst.az)),
		StartTime:            ptr(as.now()),
		StatusCode:           astypes.ScalingActivityStatusCodeInProgress,
		Progress:             ptr(int32(0)),
	}
}

// DescribeLifecycleHooks describes a group's lifecycle hooks, all or those named in LifecycleHookNames.
// Amazon EC2 Auto Scaling API Reference, "DescribeLifecycleHooks". Errors: ValidationError (unknown group).
func (c *AutoScalingClient) DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:DescribeLifecycleHooks")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	g := as.group(*in.AutoScalingGroupName)
	if g == nil {
		return nil, groupNotFound(*in.AutoScalingGroupName)
	}
	want := map[string]bool{}
	for _, n := range in.LifecycleHookNames {
		want[n] = true
	}
	out := &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: []astypes.LifecycleHook{}}
	for _, h := range g.hooks {
		if len(want) > 0 && !want[h.Name] {
			continue
		}
		global := 100 * h.HeartbeatTimeout
		if global > 48*time.Hour {
			global = 48 * time.Hour
		}
		lh := astypes.LifecycleHook{
			AutoScalingGroupName: ptr(g.name),
			LifecycleHookName:    ptr(h.Name),
			LifecycleTransition:  ptr(h.Transition),
			HeartbeatTimeout:     ptr(int32(h.HeartbeatTimeout / time.Second)),
			GlobalTimeout:        ptr(int32(global / time.Second)),
			DefaultResult:        ptr(h.DefaultResult),
			NotificationMetadata: nilIfEmpty(h.NotificationMetadata),
		}
		if q := as.sqs.queue(h.QueueURL); q != nil {
			lh.NotificationTargetARN = ptr(q.arn)
			lh.RoleARN = ptr(fmt.Sprintf("arn:aws:iam::%s:role/patch-agent-lifecycle-hook", as.opts.AccountID))
		}
		out.LifecycleHooks = append(out.LifecycleHooks, lh)
	}
	return out, nil
}

// findAction finds the active lifecycle action a CompleteLifecycleAction or RecordLifecycleActionHeartbeat
// request names: by LifecycleActionToken, or by InstanceId and LifecycleHookName.
func (as *autoScalingService) findAction(groupName, hookName, token, instanceID *string) (*lifecycleAction, error) {
	if hookName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'lifecycleHookName' failed to satisfy constraint: Member must not be null")
	}
	if groupName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	if token != nil {
		act := as.actions[*token]
		if act == nil || !act.active || act.group != *groupName || act.hook != *hookName ||
			(instanceID != nil && act.instanceID != *instanceID) {
			return nil, apiError("ValidationError", "No active Lifecycle Action found with token %s", *token)
		}
		return act, nil
	}
	if instanceID == nil {
		return nil, apiError("ValidationError", "Either LifecycleActionToken or InstanceId must be specified")
	}
	if inst := as.ec2.instance(*instanceID); inst != nil {
		for _, act := range inst.actions {
			if act.active && act.group == *groupName && act.hook == *hookName {
				return act, nil
			}
		}
	}
	return nil, apiError("ValidationError", "No active Lifecycle Action found with instance ID %s", *instanceID)
}

// CompleteLifecycleAction completes a lifecycle action, named by LifecycleActionToken or by InstanceId, with
// CONTINUE or ABANDON. Every call is recorded (LifecycleCompletions), accepted or not.
// Amazon EC2 Auto Scaling API Reference, "CompleteLifecycleAction"; User Guide, "Complete a lifecycle action in
// an Auto Scaling group". Errors: ValidationError "No active Lifecycle Action found with token <token>" when the
// action was already completed, timed out, or never existed.
func (c *AutoScalingClient) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:CompleteLifecycleAction")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &autoscaling.CompleteLifecycleActionInput{}
	}
	rec := Completion{Token: deref(in.LifecycleActionToken), InstanceID: deref(in.InstanceId), Group: deref(in.AutoScalingGroupName),
		Hook: deref(in.LifecycleHookName), Result: deref(in.LifecycleActionResult), At: as.now(), Caller: CallerAPI}
	if rec.Result != ResultContinue && rec.Result != ResultAbandon {
		as.completions = append(as.completions, rec)
		return nil, apiError("ValidationError", "1 validation error detected: Value '%s' at 'lifecycleActionResult' failed to satisfy constraint: Member must be CONTINUE or ABANDON", rec.Result)
	}
	act, err := as.findAction(in.AutoScalingGroupName, in.LifecycleHookName, in.LifecycleActionToken, in.InstanceId)
	if err != nil {
		as.completions = append(as.completions, rec)
		return nil, err
	}
	rec.Token, rec.InstanceID, rec.Accepted, rec.Transition = act.token, act.instanceID, true, act.transition
	if inst := as.ec2.instance(act.instanceID); inst != nil {
		rec.Drained = as.terminationRecord(inst, "").DrainedAtRequest
		ci := as.ecs.containerInstanceOf(inst)
		rec.Healthy = ci != nil && ci.status == ciActive && ci.agentConnected
		rec.LifecycleState = inst.state
		if cfg, ok := as.refreshLaunchConfig(as.group(act.group)); ok && act.origin == placeWarmPool {
			rec.OutdatedFromPool = !as.matches(inst, cfg)
		}
	}
	as.completions = append(as.completions, rec)
	as.resolveAction(act, rec.Result)
	as.settle()
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

// RecordLifecycleActionHeartbeat restarts an active lifecycle action's heartbeat timeout from now (never beyond
// its global timeout). Every call is recorded (Heartbeats), accepted or not.
// Amazon EC2 Auto Scaling API Reference, "RecordLifecycleActionHeartbeat". Errors: as CompleteLifecycleAction.
func (c *AutoScalingClient) RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, _ ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:RecordLifecycleActionHeartbeat")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &autoscaling.RecordLifecycleActionHeartbeatInput{}
	}
	rec := Completion{Token: deref(in.LifecycleActionToken), InstanceID: deref(in.InstanceId), Group: deref(in.AutoScalingGroupName),
		Hook: deref(in.LifecycleHookName), At: as.now(), Caller: CallerAPI}
	act, err := as.findAction(in.AutoScalingGroupName, in.LifecycleHookName, in.LifecycleActionToken, in.InstanceId)
	if err != nil {
		as.heartbeats = append(as.heartbeats, rec)
		return nil, err
	}
	rec.Token, rec.InstanceID, rec.Accepted = act.token, act.instanceID, true
	as.heartbeats = append(as.heartbeats, rec)
	as.armTimeout(act, act.heartbeat)
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
}

// SetInstanceProtection sets or clears scale-in protection on instances of a group.
// Amazon EC2 Auto Scaling API Reference, "SetInstanceProtection"; User Guide, "Use instance scale-in
// protection". Errors: ValidationError (unknown group, instance not in the group, more than 50 instances).
func (c *AutoScalingClient) SetInstanceProtection(ctx context.Context, in *autoscaling.SetInstanceProtectionInput, _ ...func(*autoscaling.Options)) (*autoscaling.SetInstanceProtectionOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:SetInstanceProtection")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil || in.ProtectedFromScaleIn == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'protectedFromScaleIn' failed to satisfy constraint: Member must not be null")
	}
	g := as.group(*in.AutoScalingGroupName)
	if g == nil {
		return nil, groupNotFound(*in.AutoScalingGroupName)
	}
	if len(in.InstanceIds) > 50 {
		return nil, apiError("ValidationError", "1 validation error detected: Value at 'instanceIds' failed to satisfy constraint: Member must have length less than or equal to 50")
	}
	var list []*instance
	for _, id := range in.InstanceIds {
		inst := as.ec2.instance(id)
		if inst == nil || inst.group != g.name || inst.state == string(astypes.LifecycleStateTerminated) {
			return nil, apiError("ValidationError", "The instance %s is not part of Auto Scaling group %s.", id, g.name)
		}
		list = append(list, inst)
	}
	for _, inst := range list {
		inst.protected = *in.ProtectedFromScaleIn
	}
	as.settle()
	return &autoscaling.SetInstanceProtectionOutput{}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
