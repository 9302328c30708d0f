package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// autoScalingService is Amazon EC2 Auto Scaling: groups and their lifecycle hooks and actions, terminations,
// lifecycle completions and heartbeats, every write of desired capacity (writers.go), launch shortfalls and
// failed-launch activities (activities.go), instance refreshes (refresh.go), warm pools (warmpool.go) and
// launch configurations (launchconfig.go). Its instances are EC2's (ec2Service), tagged with their group.
type autoScalingService struct {
	*world

	groups         map[string]*group
	actions        map[string]*lifecycleAction // by lifecycle action token
	terminations   []Termination
	completions    []Completion
	heartbeats     []Completion
	capacityWrites []CapacityWrite              // every call that could change desired capacity (writers.go)
	shortfalls     map[string]*Shortfall        // by group: launches fail for lack of capacity (activities.go)
	activities     map[string][]scalingActivity // by group, oldest first: failed launches (activities.go)

	launchConfigs map[string]*launchConfiguration // by name (launchconfig.go)
	lcOrder       []string
	lcGroups      map[string]*launchConfiguration // a group created on a launch configuration, by group name
}

// Lifecycle transitions and results as Auto Scaling names them.
const (
	TransitionLaunching   = "autoscaling:EC2_INSTANCE_LAUNCHING"
	TransitionTerminating = "autoscaling:EC2_INSTANCE_TERMINATING"
	ResultContinue        = "CONTINUE"
	ResultAbandon         = "ABANDON"
)

// ECSManagedDrainingHookName is the lifecycle hook Amazon ECS adds to a capacity provider's Auto Scaling group
// when managed instance draining is on (GroupSpec.ECSManagedDraining).
const ECSManagedDrainingHookName = "ecs-managed-draining-termination-hook"

// Termination causes recorded in Termination.Cause.
const (
	CauseAPI     = "api"      // TerminateInstanceInAutoScalingGroup
	CauseScaleIn = "scale-in" // desired capacity below the running instances
	CauseAbandon = "abandon"  // a launching lifecycle action ended with ABANDON
	CauseHealth  = "health"   // the instance failed its health check
)

// Callers recorded in Completion.Caller.
const (
	CallerAPI = "api" // a call through the AutoScaling client (the agent)
	CallerECS = "ecs" // Amazon ECS managed instance draining, simulated
)

// countsTowardCapacity reports whether an instance in this lifecycle state counts toward its group's capacity.
func countsTowardCapacity(state string) bool {
	switch astypes.LifecycleState(state) {
	case astypes.LifecycleStatePending, astypes.LifecycleStatePendingWait, astypes.LifecycleStatePendingProceed,
		astypes.LifecycleStateInService,
		// A root volume replacement keeps the instance in the group (StartRootVolumeReplacement).
		astypes.LifecycleStateReplacingRootVolume, astypes.LifecycleStateReplacingRootVolumeWait,
		astypes.LifecycleStateReplacingRootVolumeProceed, astypes.LifecycleStateRootVolumeReplaced:
		return true
	}
	return false
}

func isTerminating(state string) bool {
	switch astypes.LifecycleState(state) {
	case astypes.LifecycleStateTerminating, astypes.LifecycleStateTerminatingWait, astypes.LifecycleStateTerminatingProceed:
		return true
	}
	return false
}

// GroupSpec describes an Auto Scaling group to create with CreateGroup.
type GroupSpec struct {
	Name              string
	Min, Max, Desired int32
	LaunchTemplateID  string
	// LaunchTemplateVersion is "$Default" (also when empty), "$Latest" or a version number such as "3".
	LaunchTemplateVersion string
	// MixedInstances references the template through MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification
	// instead of the group's LaunchTemplate.
	MixedInstances bool
	// Overrides are the instance types of the mixed instances policy's overrides (MixedInstances only).
	// Instances still launch as the template's instance type.
	Overrides []string
	// AvailabilityZones default to <region>a, <region>b, <region>c.
	AvailabilityZones []string
	// Tags are the group's tags; all propagate at launch.
	Tags map[string]string
	// ECSCluster is the cluster the instances' container agent registers in ("" = none). The cluster is created
	// when it does not exist.
	ECSCluster string
	Hooks      []HookSpec
	// NewInstancesProtectedFromScaleIn marks every instance the group launches as protected from scale in.
	NewInstancesProtectedFromScaleIn bool
	// ECSManagedDraining simulates an ECS capacity provider with managed instance draining: the group carries
	// ECS's own terminating hook (ECSManagedDrainingHookName), and on every termination ECS sets the container
	// instance DRAINING and completes its hook with CONTINUE once no non-daemon task is left but STOPPED.
	ECSManagedDraining bool
	// CapacityProvider makes the group an Amazon ECS capacity provider of ECSCluster, with managed scaling,
	// managed termination protection and managed draining as it says (capacityprovider.go).
	CapacityProvider *CapacityProviderSpec
	// DefaultInstanceWarmup is the group's default instance warmup (nil = not set). HealthCheckGracePeriod
	// defaults to 300s. An instance refresh warms up by the first, else the second (refresh.go).
	DefaultInstanceWarmup  *time.Duration
	HealthCheckGracePeriod time.Duration
	// InstanceRequirements makes the mixed instances policy select instance types by attributes
	// (MixedInstances only); instances still launch as the template's instance type.
	InstanceRequirements bool
}

// HookSpec describes a lifecycle hook.
type HookSpec struct {
	Name string
	// Transition is TransitionLaunching or TransitionTerminating.
	Transition string
	// HeartbeatTimeout defaults to 3600s.
	HeartbeatTimeout time.Duration
	// DefaultResult is ResultContinue (also when empty) or ResultAbandon.
	DefaultResult string
	// QueueURL is the SQS queue notifications go to ("" = none).
	QueueURL string
	// NotificationMetadata is copied into every notification ("" = none).
	NotificationMetadata string
}

type group struct {
	name, arn            string
	min, max, desired    int32
	ltID                 string
	ltVersion            string // "$Default", "$Latest" or a number
	mixed                bool
	overrides            []string
	azs                  []string
	tags                 map[string]string
	cluster              string
	hooks                []*HookSpec
	newProtected         bool
	createdAt            time.Time
	instances            []string // launch order, terminated ones included
	managedDraining      bool
	capacityProvider     *capacityProvider // nil when the group is no ECS capacity provider
	warmPool             *warmPool         // nil without a warm pool (warmpool.go)
	desiredChanges       []DesiredChange
	refreshes            []*instanceRefresh // oldest first (refresh.go)
	defaultWarmup        *time.Duration
	healthCheckGrace     time.Duration
	instanceRequirements bool
}

func (g *group) hooksFor(transition string) []*HookSpec {
	var out []*HookSpec
	for _, h := range g.hooks {
		if h.Transition == transition {
			out = append(out, h)
		}
	}
	return out
}

// lifecycleAction is one lifecycle hook's action for one instance, identified by its token.
type lifecycleAction struct {
	token, instanceID, group, hook, transition string
	defaultResult                              string
	heartbeat                                  time.Duration
	started, deadline, globalDeadline          time.Time
	active                                     bool
	result                                     string
	gen                                        int
	target                                     string // the hook's notification target (queue URL) at the time
	timedOut                                   bool   // ended by its heartbeat or global timeout
	origin                                     string // the action's Origin (WarmPool for an instance leaving the pool)
}

// Termination records one instance leaving service: who asked, and how drained the instance was at that moment.
type Termination struct {
	InstanceID, Group string
	// Cause is CauseAPI, CauseScaleIn, CauseAbandon or CauseHealth.
	Cause       string
	RequestedAt time.Time
	// DrainedAtRequest is true when the container instance was DRAINING and had no non-daemon task other than
	// STOPPED, or when the instance had no container instance at all.
	DrainedAtRequest bool
	// ContainerInstanceStatus is ACTIVE, DRAINING or "" (none) at the request.
	ContainerInstanceStatus string
	// NonStoppedTasks counts non-daemon tasks whose lastStatus was not STOPPED at the request.
	NonStoppedTasks int
	// NonStoppedDaemonTasks counts daemon-service tasks whose lastStatus was not STOPPED at the request (they
	// stop last on a draining instance and do not make it undrained).
	NonStoppedDaemonTasks int
	// Proceeded is set once the instance left Terminating:Wait (shutting down); DrainedAtProceed says whether
	// it was drained then — what matters with ECS managed draining, which drains after the request.
	Proceeded, DrainedAtProceed bool
	// ProceededAt is when the instance left Terminating:Wait (zero until Proceeded).
	ProceededAt time.Time
}

// Completion records one CompleteLifecycleAction or RecordLifecycleActionHeartbeat call, accepted or not.
type Completion struct {
	Token, InstanceID, Group, Hook string
	// Result is CONTINUE or ABANDON for completions, "" for heartbeats.
	Result   string
	At       time.Time
	Accepted bool
	// Caller is CallerAPI for calls through the AutoScaling client, CallerECS for simulated ECS managed draining.
	Caller string
	// Transition is the action's lifecycle transition (for accepted calls).
	Transition string
	// Drained is true when, at the call, the instance's container instance was DRAINING with no non-daemon task
	// other than STOPPED, or the instance had no container instance (as Termination.DrainedAtRequest).
	Drained bool
	// Healthy is true when, at the call, the instance's container instance was ACTIVE with its agent connected.
	Healthy bool
	// LifecycleState is the instance's lifecycle state at the call (for accepted calls), e.g. Pending:Wait or
	// Warmed:Pending:Wait for a launch into the warm pool, whose instance is stopped, not serving.
	LifecycleState string
	// OutdatedFromPool is true when, at the call, the action's instance was leaving the warm pool (Origin
	// WarmPool) on another configuration than the one the group's instance refresh in progress launches.
	OutdatedFromPool bool
}

// CreateGroup creates an Auto Scaling group and launches Desired instances that are InService at once (already
// booted; their container instances ACTIVE and their daemon tasks RUNNING). Hooks with a QueueURL first send
// their test notification. Setup helper: not counted. Errors: ValidationError (capacity limits, launch template),
// AlreadyExists.
func (as *autoScalingService) CreateGroup(spec GroupSpec) error {
	defer as.lock()()
	if spec.Name == "" {
		return apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	if as.groups[spec.Name] != nil {
		return apiError("AlreadyExists", "AutoScalingGroup by this name already exists - A group with the name %s already exists", spec.Name)
	}
	if err := validateCapacity(spec.Min, spec.Max, spec.Desired); err != nil {
		return err
	}
	version := spec.LaunchTemplateVersion
	if version == "" {
		version = "$Default"
	}
	if _, err := as.validateTemplateRef(spec.LaunchTemplateID, version); err != nil {
		return err
	}
	cp, err := normalizeCapacityProvider(spec)
	if err != nil {
		return err
	}
	azs := spec.AvailabilityZones
	if len(azs) == 0 {
		azs = []string{as.opts.Region + "a", as.opts.Region + "b", as.opts.Region + "c"}
	}
	g := &group{
		name:                 spec.Name,
		arn:                  fmt.Sprintf("arn:aws:autoscaling:%s:%s:autoScalingGroup:%s:autoScalingGroupName/%s", as.opts.Region, as.opts.AccountID, as.uuid(), spec.Name),
		min:                  spec.Min,
		max:                  spec.Max,
		desired:              spec.Desired,
		ltID:                 spec.LaunchTemplateID,
		ltVersion:            version,
		mixed:                spec.MixedInstances,
		overrides:            append([]string(nil), spec.Overrides...),
		azs:                  append([]string(nil), azs...),
		tags:                 map[string]string{},
		cluster:              spec.ECSCluster,
		newProtected:         spec.NewInstancesProtectedFromScaleIn,
		createdAt:            as.now(),
		managedDraining:      spec.ECSManagedDraining,
		defaultWarmup:        spec.DefaultInstanceWarmup,
		healthCheckGrace:     spec.HealthCheckGracePeriod,
		instanceRequirements: spec.MixedInstances && spec.InstanceRequirements,
	}
	if g.healthCheckGrace <= 0 {
		g.healthCheckGrace = 300 * time.Second
	}
	for k, v := range spec.Tags {
		g.tags[k] = v
	}
	if g.cluster != "" && as.ecs.cluster(g.cluster) == nil {
		as.ecs.createCluster(g.cluster)
	}
	as.groups[g.name] = g
	for _, h := range spec.Hooks {
		if err := as.putHook(g, h); err != nil {
			delete(as.groups, g.name)
			return err
		}
	}
	if spec.ECSManagedDraining {
		_ = as.putHook(g, HookSpec{Name: ECSManagedDrainingHookName, Transition: TransitionTerminating, HeartbeatTimeout: time.Hour})
	}
	if cp != nil {
		as.ecs.attachCapacityProvider(g, *cp)
	}
	as.instant = true
	as.settle()
	as.instant = false
	return nil
}

// PutLifecycleHook adds a lifecycle hook to a group (or replaces the one with the same name). With a QueueURL,
// Auto Scaling first sends a test notification to the queue. Setup helper: not counted.
func (as *autoScalingService) PutLifecycleHook(groupName string, hook HookSpec) error {
	defer as.lock()()
	g := as.groups[groupName]
	if g == nil {
		return groupNotFound(groupName)
	}
	return as.putHook(g, hook)
}

// DeleteLifecycleHook removes a lifecycle hook from a group, as a stack update that drops it does. Amazon EC2
// Auto Scaling API Reference, "DeleteLifecycleHook": outstanding lifecycle actions of the hook end with CONTINUE
// for terminating instances and ABANDON for launching ones. Setup helper: not counted.
func (as *autoScalingService) DeleteLifecycleHook(groupName, hookName string) error {
	defer as.lock()()
	g := as.groups[groupName]
	if g == nil {
		return groupNotFound(groupName)
	}
	i := slices.IndexFunc(g.hooks, func(h *HookSpec) bool { return h.Name == hookName })
	if i < 0 {
		return apiError("ValidationError", "No Lifecycle Hook found with name %s for group %s", hookName, groupName)
	}
	g.hooks = slices.Delete(g.hooks, i, i+1)
	var outstanding []*lifecycleAction
	for _, act := range as.actions {
		if act.active && act.group == groupName && act.hook == hookName {
			outstanding = append(outstanding, act)
		}
	}
	slices.SortFunc(outstanding, func(a, b *lifecycleAction) int { return strings.Compare(a.token, b.token) }) // the same run every time
	for _, act := range outstanding {
		result := ResultContinue
		if act.transition == TransitionLaunching {
			result = ResultAbandon
		}
		as.resolveAction(act, result)
	}
	return nil
}

func (as *autoScalingService) putHook(g *group, h HookSpec) error {
	if h.Transition != TransitionLaunching && h.Transition != TransitionTerminating {
		return apiError("ValidationError", "Invalid Lifecycle Transition: %s", h.Transition)
	}
	if h.HeartbeatTimeout <= 0 {
		// Amazon EC2 Auto Scaling API Reference, "PutLifecycleHook": HeartbeatTimeout defaults to 3600 seconds.
		h.HeartbeatTimeout = time.Hour
	}
	if h.DefaultResult == "" {
		h.DefaultResult = ResultContinue
	}
	if h.DefaultResult != ResultContinue && h.DefaultResult != ResultAbandon {
		return apiError("ValidationError", "Invalid value for DefaultResult: %s", h.DefaultResult)
	}
	replaced := false
	for i, old := range g.hooks {
		if old.Name == h.Name {
			g.hooks[i] = &h
			replaced = true
		}
	}
	if !replaced {
		g.hooks = append(g.hooks, &h)
	}
	// Amazon EC2 Auto Scaling User Guide, "Configure a notification target for lifecycle notifications": when a
	// lifecycle hook is added with an SQS target, Auto Scaling sends a test notification to it.
	if h.QueueURL != "" {
		body, _ := json.Marshal(testNotification{
			AccountID:            as.opts.AccountID,
			RequestID:            as.uuid(),
			AutoScalingGroupARN:  g.arn,
			AutoScalingGroupName: g.name,
			Service:              "AWS Auto Scaling",
			Event:                "autoscaling:TEST_NOTIFICATION",
			Time:                 awsTime(as.now()),
		})
		as.sqs.enqueue(h.QueueURL, string(body))
	}
	return nil
}

// testNotification is the body of the test message a lifecycle hook sends to its target when created
// (fixtures/events/asg-hook-test-notification.json).
type testNotification struct {
	AccountID            string `json:"AccountId"`
	RequestID            string `json:"RequestId"`
	AutoScalingGroupARN  string `json:"AutoScalingGroupARN"`
	AutoScalingGroupName string `json:"AutoScalingGroupName"`
	Service              string `json:"Service"`
	Event                string `json:"Event"`
	Time                 string `json:"Time"`
}

// hookNotification is the body of a lifecycle action notification sent directly by a hook to its SQS target
// (fixtures/events/asg-hook-direct-terminating.json).
type hookNotification struct {
	Origin               string `json:"Origin"`
	LifecycleHookName    string `json:"LifecycleHookName"`
	Destination          string `json:"Destination"`
	AccountID            string `json:"AccountId"`
	RequestID            string `json:"RequestId"`
	LifecycleTransition  string `json:"LifecycleTransition"`
	AutoScalingGroupName string `json:"AutoScalingGroupName"`
	Service              string `json:"Service"`
	Time                 string `json:"Time"`
	EC2InstanceID        string `json:"EC2InstanceId"`
	LifecycleActionToken string `json:"LifecycleActionToken"`
	NotificationMetadata string `json:"NotificationMetadata,omitempty"`
}

// SetDesiredCapacity changes a group's desired capacity as a user or an autoscaler would, with the semantics of
// the SetDesiredCapacity API (ValidationError outside [min, max]). Setup helper: not counted.
func (as *autoScalingService) SetDesiredCapacity(groupName string, desired int32) error {
	defer as.lock()()
	return as.writeDesired(groupName, desired, CallerTest)
}

// writeDesired is a SetDesiredCapacity call by by: the change, and its record in CapacityWrites. Callers hold
// the lock.
func (as *autoScalingService) writeDesired(groupName string, desired int32, by string) error {
	g := as.groups[groupName]
	if g == nil {
		return as.setDesiredBy(groupName, desired, by)
	}
	since, from := len(as.terminations), g.desired
	err := as.setDesiredBy(groupName, desired, by)
	as.recordWrite(CapacityWrite{Group: g.name, By: by, Op: OpSetDesiredCapacity, From: from, To: g.desired, MaxFrom: g.max, MaxTo: g.max,
		Accepted: err == nil}, since)
	return err
}

func (as *autoScalingService) setDesiredBy(groupName string, desired int32, by string) error {
	g := as.groups[groupName]
	if g == nil {
		return groupNotFound(groupName)
	}
	// Amazon EC2 Auto Scaling User Guide, "Set capacity limits on your Auto Scaling group": the desired capacity
	// must stay within the minimum and maximum.
	if desired > g.max {
		return apiError("ValidationError", "New SetDesiredCapacity value %d is above max value %d for the AutoScalingGroup.", desired, g.max)
	}
	if desired < g.min {
		return apiError("ValidationError", "New SetDesiredCapacity value %d is below min value %d for the AutoScalingGroup.", desired, g.min)
	}
	from := g.desired
	g.desired = desired
	as.recordDesired(g, from, by)
	as.settle()
	return nil
}

// SetGroupTag sets the group's tag key to value (CreateOrUpdateTags), or removes it when value is ""
// (DeleteTags), as a user would. Setup helper: not counted. Errors: the group does not exist.
func (as *autoScalingService) SetGroupTag(groupName, key, value string) error {
	defer as.lock()()
	g := as.groups[groupName]
	if g == nil {
		return groupNotFound(groupName)
	}
	if value == "" {
		delete(g.tags, key)
	} else {
		g.tags[key] = value
	}
	return nil
}

// ProtectInstance sets or clears an instance's scale-in protection, as ECS managed termination protection or a
// user would. Setup helper: not counted. It reports false when the instance does not exist.
func (as *autoScalingService) ProtectInstance(instanceID string, protected bool) bool {
	defer as.lock()()
	inst := as.ec2.instance(instanceID)
	if inst == nil {
		return false
	}
	inst.protected = protected
	as.settle()
	return true
}

// MarkInstanceUnhealthy fails an instance's health check: Auto Scaling terminates it (cause "health") and
// launches a replacement. Setup helper: not counted. It reports false when the instance does not exist.
func (as *autoScalingService) MarkInstanceUnhealthy(instanceID string) bool {
	defer as.lock()()
	inst := as.ec2.instance(instanceID)
	if inst == nil {
		return false
	}
	inst.unhealthy = true
	as.settle()
	return true
}

func validateCapacity(minSize, maxSize, desired int32) error {
	if maxSize < minSize {
		return apiError("ValidationError", "Max bound, %d, must be greater than or equal to min bound, %d", maxSize, minSize)
	}
	if desired < minSize || desired > maxSize {
		return apiError("ValidationError", "Desired capacity:%d must be between the specified min size:%d and max size:%d", desired, minSize, maxSize)
	}
	return nil
}

func groupNotFound(name string) error {
	return apiError("ValidationError", "AutoScalingGroup name not found - AutoScalingGroup %s not found", name)
}

// validateTemplateRef checks that a group's launch template reference resolves.
func (as *autoScalingService) validateTemplateRef(id, version string) (*launchTemplate, error) {
	t := as.ec2.template(id)
	if t == nil {
		return nil, apiError("ValidationError", "You must use a valid fully-formed launch template. The specified launch template, with template ID %s, does not exist.", id)
	}
	if _, ok := t.resolve(version); !ok {
		return nil, apiError("ValidationError", "You must use a valid fully-formed launch template. Could not find launch template version %s for launch template ID %s.", version, id)
	}
	return t, nil
}

// running returns the group's instances that count toward its capacity.
func (as *autoScalingService) running(g *group) []*instance {
	var out []*instance
	for _, id := range g.instances {
		if inst := as.ec2.instance(id); countsTowardCapacity(inst.state) {
			out = append(out, inst)
		}
	}
	return out
}

// reconcileGroup keeps a group at its desired capacity. Callers hold the lock.
func (as *autoScalingService) reconcileGroup(g *group) bool {
	changed := false
	// Amazon EC2 Auto Scaling User Guide, "Health checks for instances in an Auto Scaling group": an instance
	// that fails its health check is terminated and replaced. "Instance maintenance policy for Auto Scaling
	// group": without a policy, health check replacement terminates and launches at the same time.
	for _, inst := range as.running(g) {
		if inst.unhealthy {
			as.beginTerminate(inst, CauseHealth)
			changed = true
		}
	}
	// Amazon EC2 Auto Scaling User Guide, "Set capacity limits on your Auto Scaling group": the group launches or
	// terminates instances until the number of running instances equals the desired capacity. Instances that
	// are terminating no longer count.
	// An instance refresh may run the group above its desired capacity by its surge (refresh.go).
	target := int(g.desired) + as.refreshSurge(g)
	running := as.running(g)
	for len(running) < target {
		inst := as.launch(g)
		if inst == nil {
			break
		}
		running = append(running, inst)
		changed = true
	}
	for len(running) > target {
		victim := as.chooseScaleIn(g, running)
		if victim == nil {
			break // every instance is protected from scale in
		}
		as.beginTerminate(victim, CauseScaleIn)
		running = as.running(g)
		changed = true
	}
	return changed
}

// currentVersion resolves the group's launch template reference now.
func (as *autoScalingService) currentVersion(g *group) (*launchTemplate, *templateVersion) {
	ltID, ltVersion := g.ltID, g.ltVersion
	if c, ok := as.refreshLaunchConfig(g); ok { // refresh.go: the desired configuration while a refresh replaces
		ltID, ltVersion = c.ltID, c.ltVersion
	}
	t := as.ec2.template(ltID)
	if t == nil {
		return nil, nil
	}
	v, ok := t.resolve(ltVersion)
	if !ok {
		return t, nil
	}
	return t, v
}

// newInstance records a new EC2 instance of group g launched from template version v, in lifecycle state
// state (Pending into the group, Warmed:Pending into its warm pool), in the AZ Auto Scaling picks. Callers hold
// the lock.
func (as *autoScalingService) newInstance(g *group, t *launchTemplate, v *templateVersion, state string) *instance {
	inst := &instance{
		id:           "i-" + as.hex(17),
		group:        g.name,
		az:           as.pickAZ(g),
		imageID:      as.ec2.launchImageID(v.imageID), // resolve:ssm: resolved at launch (images.go)
		instanceType: v.instanceType,
		ltID:         t.id,
		ltName:       t.name,
		ltVersion:    v.number,
		launchTime:   as.now(),
		state:        state,
		ec2State:     ec2types.InstanceStateNamePending,
		protected:    g.newProtected,
		cluster:      g.cluster,
	}
	as.ec2.addInstance(inst)
	return inst
}

// launch starts one instance for the group. Callers hold the lock.
func (as *autoScalingService) launch(g *group) *instance {
	if inst := as.launchFromWarmPool(g); inst != nil { // warmpool.go: a scale out draws on the warm pool first
		return inst
	}
	if as.launchFails(g) { // activities.go: no capacity for the group's instance type
		return nil
	}
	// Amazon EC2 Auto Scaling User Guide, "Use launch templates with Amazon EC2 Auto Scaling" and API Reference,
	// "LaunchTemplateSpecification": the group launches from the version its reference resolves to at launch
	// time ($Default -> the template's default version, $Latest -> the highest version, or the given number),
	// whether the reference is the group's LaunchTemplate or its MixedInstancesPolicy's.
	t, v := as.currentVersion(g)
	if v == nil {
		return nil
	}
	inst := as.newInstance(g, t, v, string(astypes.LifecycleStatePending))
	g.instances = append(g.instances, inst.id)
	if as.instant {
		inst.state = string(astypes.LifecycleStateInService)
		inst.ec2State = ec2types.InstanceStateNameRunning
		as.ecs.agentConnect(inst)
		return inst
	}
	as.after(as.opts.BootDelay, func() { as.boot(inst) })
	return inst
}

// pickAZ returns the enabled Availability Zone with the fewest running instances.
// Amazon EC2 Auto Scaling User Guide, "Suspend and resume Amazon EC2 Auto Scaling processes" (AZRebalance,
// "Rebalancing activities"): the group keeps its instances balanced evenly across its enabled Availability
// Zones, launching into the zone with the fewest instances.
//
// Among zones with equally few instances, a launch while an instance refresh replaces goes to a zone where an
// instance the refresh still has to replace runs: the refresh terminates in the zone with the most instances
// (zoneBalancedOrder), so the replacement keeps the spread it found. The documentation does not say where a
// refresh's launches go; the model keeps the balance it promises for terminations (docs/simulation.md).
func (as *autoScalingService) pickAZ(g *group) string {
	count := map[string]int{}
	for _, inst := range as.running(g) {
		count[inst.az]++
	}
	pending := map[string]bool{}
	if r := as.activeRefresh(g); r != nil {
		for _, id := range r.toReplace {
			if inst := as.ec2.instance(id); inst != nil && countsTowardCapacity(inst.state) && !isTerminating(inst.state) {
				pending[inst.az] = true
			}
		}
	}
	best := g.azs[0]
	for _, az := range g.azs {
		if count[az] < count[best] || (count[az] == count[best] && pending[az] && !pending[best]) {
			best = az
		}
	}
	return best
}

// boot ends the Pending phase.
// Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling instance lifecycle" and "Amazon EC2 Auto Scaling
// lifecycle hooks": a launched instance is Pending until it is running; with a launching hook it then waits in
// Pending:Wait (its user data and ECS agent already run) until the action completes or times out, otherwise it
// goes InService.
func (as *autoScalingService) boot(inst *instance) {
	if inst.state != string(astypes.LifecycleStatePending) {
		return
	}
	inst.ec2State = ec2types.InstanceStateNameRunning
	as.after(as.opts.AgentConnectDelay, func() { as.ecs.agentConnect(inst) })
	g := as.groups[inst.group]
	if hooks := g.hooksFor(TransitionLaunching); len(hooks) > 0 {
		as.enterWait(inst, g, TransitionLaunching, hooks)
		return
	}
	inst.state = string(astypes.LifecycleStateInService)
}

// enterWait puts the instance into Pending:Wait or Terminating:Wait with one lifecycle action per hook, and
// sends each hook's notification.
// Amazon EC2 Auto Scaling User Guide, "How lifecycle hooks work in Auto Scaling groups" and "Configure a
// notification target for lifecycle notifications".
func (as *autoScalingService) enterWait(inst *instance, g *group, transition string, hooks []*HookSpec) {
	waitState, origin, destination := as.waitRoute(inst, transition) // warmpool.go: warm pool moves wait elsewhere
	inst.state = waitState
	inst.actions = nil
	for _, h := range hooks {
		act := &lifecycleAction{
			token:         as.uuid(),
			instanceID:    inst.id,
			group:         g.name,
			hook:          h.Name,
			transition:    transition,
			defaultResult: h.DefaultResult,
			heartbeat:     h.HeartbeatTimeout,
			started:       as.now(),
			active:        true,
			target:        h.QueueURL,
			origin:        origin,
		}
		// Amazon EC2 Auto Scaling API Reference, "LifecycleHook": GlobalTimeout, the longest an instance can stay
		// in a wait state, is 48 hours or 100 times HeartbeatTimeout, whichever is smaller.
		global := 100 * h.HeartbeatTimeout
		if global > 48*time.Hour {
			global = 48 * time.Hour
		}
		act.globalDeadline = act.started.Add(global)
		as.actions[act.token] = act
		inst.actions = append(inst.actions, act)
		as.armTimeout(act, h.HeartbeatTimeout)
		if h.QueueURL != "" {
			n := hookNotification{
				LifecycleHookName:    h.Name,
				AccountID:            as.opts.AccountID,
				RequestID:            as.uuid(),
				LifecycleTransition:  transition,
				AutoScalingGroupName: g.name,
				Service:              "AWS Auto Scaling",
				Time:                 awsTime(as.now()),
				EC2InstanceID:        inst.id,
				LifecycleActionToken: act.token,
				NotificationMetadata: h.NotificationMetadata,
			}
			n.Origin, n.Destination = origin, destination
			body, _ := json.Marshal(n)
			as.sqs.enqueue(h.QueueURL, string(body))
		}
	}
	if transition == TransitionTerminating && g.managedDraining {
		// Amazon ECS Developer Guide, "Safely stop Amazon ECS workloads running on EC2 instances": with managed
		// instance draining, ECS sets the terminating instance's container instance to DRAINING.
		if ci := as.ecs.containerInstanceOf(inst); ci != nil && ci.status == ciActive {
			as.ecs.setContainerInstanceStatus(ci, ciDraining)
		}
	}
}

// armTimeout (re)starts an action's heartbeat timeout: at the deadline the hook's DefaultResult applies.
// Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling lifecycle hooks": if the heartbeat timeout
// elapses, Auto Scaling performs the default action; RecordLifecycleActionHeartbeat restarts the timeout, up to
// the global timeout.
func (as *autoScalingService) armTimeout(act *lifecycleAction, d time.Duration) {
	act.gen++
	gen := act.gen
	act.deadline = as.now().Add(d)
	if act.deadline.After(act.globalDeadline) {
		act.deadline = act.globalDeadline
	}
	as.sched.add(act.deadline, func() {
		if act.active && act.gen == gen {
			act.timedOut = true
			as.resolveAction(act, act.defaultResult)
		}
	})
}

// resolveAction ends a lifecycle action with result and moves the instance on when it no longer waits.
// Amazon EC2 Auto Scaling User Guide, "Complete a lifecycle action in an Auto Scaling group": for a launching
// instance CONTINUE puts it in service and ABANDON terminates it; for a terminating instance both let it
// terminate, but ABANDON stops any remaining actions (other hooks) while CONTINUE lets them complete.
func (as *autoScalingService) resolveAction(act *lifecycleAction, result string) {
	act.active = false
	act.result = result
	inst := as.ec2.instance(act.instanceID)
	if inst == nil {
		return
	}
	if result == ResultAbandon {
		for _, other := range inst.actions {
			if other.active {
				other.active = false
				other.result = ResultAbandon
			}
		}
	}
	for _, other := range inst.actions {
		if other.active {
			return
		}
	}
	inst.actions = nil
	if as.resolveWarmPoolAction(inst, act, result) { // warmpool.go
		return
	}
	switch act.transition {
	case TransitionLaunching:
		if inst.state != string(astypes.LifecycleStatePendingWait) {
			return
		}
		if result == ResultAbandon {
			as.beginTerminate(inst, CauseAbandon)
			return
		}
		inst.state = string(astypes.LifecycleStateInService)
	case TransitionTerminating:
		if inst.state == string(astypes.LifecycleStateTerminatingWait) {
			as.proceed(inst)
		}
		if inst.state == string(astypes.LifecycleStateReplacingRootVolumeWait) {
			as.replaceRootVolume(inst) // autoscalinginstances.go
		}
	}
}

// beginTerminate takes an instance out of service.
// Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling instance lifecycle": a terminating instance goes
// Terminating, then Terminating:Wait while terminating hooks run, then Terminating:Proceed and Terminated.
func (as *autoScalingService) beginTerminate(inst *instance, cause string) {
	if as.warmPoolTerminate(inst, cause) { // warmpool.go: out of the warm pool, or back into it on scale in
		return
	}
	if isTerminating(inst.state) || inst.state == string(astypes.LifecycleStateTerminated) {
		return
	}
	as.terminations = append(as.terminations, as.terminationRecord(inst, cause))
	for _, act := range inst.actions {
		act.active = false
	}
	inst.actions = nil
	inst.state = string(astypes.LifecycleStateTerminating)
	g := as.groups[inst.group]
	if hooks := g.hooksFor(TransitionTerminating); len(hooks) > 0 {
		as.enterWait(inst, g, TransitionTerminating, hooks)
		return
	}
	as.proceed(inst)
}

func (as *autoScalingService) terminationRecord(inst *instance, cause string) Termination {
	t := Termination{InstanceID: inst.id, Group: inst.group, Cause: cause, RequestedAt: as.now()}
	ci := as.ecs.containerInstanceOf(inst)
	if ci == nil {
		t.DrainedAtRequest = true
		return t
	}
	t.ContainerInstanceStatus = ci.status
	t.NonStoppedTasks, t.NonStoppedDaemonTasks = as.ecs.nonStoppedTasks(ci)
	t.DrainedAtRequest = ci.status == ciDraining && t.NonStoppedTasks == 0
	return t
}

// proceed moves the instance to Terminating:Proceed (EC2 shutting-down) and, TerminateDelay later, Terminated,
// when its container instance is deregistered and its tasks stop.
// Amazon ECS Developer Guide, "Deregister an Amazon ECS container instance": a terminated container instance is
// deregistered from its cluster and its tasks stop; services start replacements elsewhere.
func (as *autoScalingService) proceed(inst *instance) {
	for i := len(as.terminations) - 1; i >= 0; i-- {
		if t := &as.terminations[i]; t.InstanceID == inst.id {
			t.DrainedAtProceed = as.terminationRecord(inst, t.Cause).DrainedAtRequest
			t.Proceeded, t.ProceededAt = true, as.now()
			break
		}
	}
	inst.state = string(astypes.LifecycleStateTerminatingProceed)
	inst.ec2State = ec2types.InstanceStateNameShuttingDown
	as.after(as.opts.TerminateDelay, func() {
		inst.state = string(astypes.LifecycleStateTerminated)
		inst.ec2State = ec2types.InstanceStateNameTerminated
		inst.terminatedAt = as.now()
		as.ecs.deregisterContainerInstance(inst)
	})
}

// chooseScaleIn picks the instance to terminate when the group is above its desired capacity.
// Amazon EC2 Auto Scaling User Guide, "Configure termination policies for Amazon EC2 Auto Scaling" (default
// termination policy) and "Use instance scale-in protection": protected instances are never chosen; the
// Availability Zone with the most instances (and at least one unprotected) goes first; within it, instances
// launched from the oldest launch template (version) go first, then those closest to the next billing hour;
// remaining ties go to the oldest launch.
func (as *autoScalingService) chooseScaleIn(g *group, running []*instance) *instance {
	azCount := map[string]int{}
	for _, inst := range running {
		azCount[inst.az]++
	}
	var candidates []*instance
	most := -1
	for _, inst := range running {
		if inst.protected {
			continue
		}
		candidates = append(candidates, inst)
		if azCount[inst.az] > most {
			most = azCount[inst.az]
		}
	}
	var pool []*instance
	for _, inst := range candidates {
		if azCount[inst.az] == most {
			pool = append(pool, inst)
		}
	}
	if len(pool) == 0 {
		return nil
	}
	t, cur := as.currentVersion(g)
	current := func(inst *instance) bool {
		return t != nil && cur != nil && inst.ltID == t.id && inst.ltVersion == cur.number
	}
	now := as.now()
	untilHour := func(inst *instance) time.Duration {
		return time.Hour - now.Sub(inst.launchTime)%time.Hour
	}
	sort.SliceStable(pool, func(i, j int) bool {
		pi, pj := pool[i], pool[j]
		if current(pi) != current(pj) {
			return !current(pi)
		}
		if pi.ltVersion != pj.ltVersion {
			return pi.ltVersion < pj.ltVersion
		}
		if untilHour(pi) != untilHour(pj) {
			return untilHour(pi) < untilHour(pj)
		}
		if !pi.launchTime.Equal(pj.launchTime) {
			return pi.launchTime.Before(pj.launchTime)
		}
		return pi.seq < pj.seq
	})
	return pool[0]
}

// InstanceView is an instance as tests and invariant checks observe it.
type InstanceView struct {
	ID, Group, AvailabilityZone, ImageID string
	// LifecycleState is Pending, Pending:Wait, InService, Terminating, Terminating:Wait, Terminating:Proceed or
	// Terminated.
	LifecycleState string
	// EC2State is pending, running, shutting-down or terminated.
	EC2State   string
	LaunchTime time.Time
	// LaunchTemplateID and LaunchTemplateVersion (a number, as a string) are what the instance was launched from.
	LaunchTemplateID      string
	LaunchTemplateVersion string
	ProtectedFromScaleIn  bool
	Healthy               bool
	ContainerInstanceARN  string
	// ContainerInstanceStatus is ACTIVE, DRAINING, or "" (never registered, or deregistered).
	ContainerInstanceStatus string
	AgentConnected          bool
	// TasksByLastStatus counts the tasks on the instance's container instance by lastStatus (STOPPED included).
	TasksByLastStatus map[string]int
}

// CountsTowardCapacity reports whether the instance counts toward its group's capacity (Pending, Pending:Wait,
// Pending:Proceed, InService, a root volume replacement): what Auto Scaling holds to the desired capacity and
// an instance refresh's surge.
func (i InstanceView) CountsTowardCapacity() bool { return countsTowardCapacity(i.LifecycleState) }

// GroupView is an Auto Scaling group as tests observe it.
type GroupView struct {
	Name              string
	Min, Max, Desired int32
	// Cluster is the ECS cluster the group's instances register in ("" = none).
	Cluster string
	// LaunchTemplateID and LaunchTemplateVersion are the group's current reference ("$Default", "$Latest", "3").
	LaunchTemplateID      string
	LaunchTemplateVersion string
	// Instances excludes Terminated ones, in launch order.
	Instances []InstanceView
}

func (as *autoScalingService) instanceView(inst *instance) InstanceView {
	v := InstanceView{
		ID:                    inst.id,
		Group:                 inst.group,
		AvailabilityZone:      inst.az,
		ImageID:               inst.imageID,
		LifecycleState:        inst.state,
		EC2State:              string(inst.ec2State),
		LaunchTime:            inst.launchTime,
		LaunchTemplateID:      inst.ltID,
		LaunchTemplateVersion: fmt.Sprint(inst.ltVersion),
		ProtectedFromScaleIn:  inst.protected,
		Healthy:               !inst.unhealthy,
		ContainerInstanceARN:  inst.ciARN,
		TasksByLastStatus:     map[string]int{},
	}
	if ci := as.ecs.containerInstanceOf(inst); ci != nil {
		v.ContainerInstanceStatus = ci.status
		v.AgentConnected = ci.agentConnected
	}
	if c := as.ecs.cluster(inst.cluster); c != nil && inst.ciARN != "" {
		for _, t := range c.tasks {
			if t.ci.arn == inst.ciARN {
				v.TasksByLastStatus[t.lastStatus]++
			}
		}
	}
	return v
}

// Group returns the named group (zero GroupView when it does not exist).
func (as *autoScalingService) Group(name string) GroupView {
	defer as.lock()()
	return as.groupView(name)
}

func (as *autoScalingService) groupView(name string) GroupView {
	g := as.groups[name]
	if g == nil {
		return GroupView{}
	}
	v := GroupView{Name: g.name, Min: g.min, Max: g.max, Desired: g.desired, Cluster: g.cluster, LaunchTemplateID: g.ltID, LaunchTemplateVersion: g.ltVersion}
	for _, id := range g.instances {
		if inst := as.ec2.instance(id); inst.state != string(astypes.LifecycleStateTerminated) {
			v.Instances = append(v.Instances, as.instanceView(inst))
		}
	}
	return v
}

// Instance returns any instance the account launched, terminated ones included.
func (as *autoScalingService) Instance(id string) (InstanceView, bool) {
	defer as.lock()()
	inst := as.ec2.instance(id)
	if inst == nil {
		return InstanceView{}, false
	}
	return as.instanceView(inst), true
}

// Terminations returns every termination so far, in order.
func (as *autoScalingService) Terminations() []Termination {
	defer as.lock()()
	return append([]Termination(nil), as.terminations...)
}

// LifecycleCompletions returns every CompleteLifecycleAction call so far, accepted or not, in order (and the
// completions of simulated ECS managed draining, Caller "ecs").
func (as *autoScalingService) LifecycleCompletions() []Completion {
	defer as.lock()()
	return append([]Completion(nil), as.completions...)
}

// Heartbeats returns every RecordLifecycleActionHeartbeat call so far, accepted or not, in order.
func (as *autoScalingService) Heartbeats() []Completion {
	defer as.lock()()
	return append([]Completion(nil), as.heartbeats...)
}

// LaunchedInstances returns how many instances the group has ever launched, the ones it was created with
// included (for "no second surge instance" assertions).
func (as *autoScalingService) LaunchedInstances(group string) int {
	defer as.lock()()
	n := 0
	for _, inst := range as.ec2.instances {
		if inst.group == group {
			n++
		}
	}
	return n
}

// overridesOf renders instance types as mixed instances policy overrides (Amazon EC2 Auto Scaling API
// Reference, "LaunchTemplateOverrides": InstanceType); nil when there are none.
func overridesOf(types []string) []astypes.LaunchTemplateOverrides {
	var out []astypes.LaunchTemplateOverrides
	for _, t := range types {
		out = append(out, astypes.LaunchTemplateOverrides{InstanceType: ptr(t)})
	}
	return out
}

// groupMember is the instance as DescribeAutoScalingGroups and DescribeWarmPool list it (Amazon EC2 Auto Scaling
// API Reference, Instance): id, zone, lifecycle state, health, scale-in protection, type and launch template.
func (inst *instance) groupMember() astypes.Instance {
	health := "Healthy"
	if inst.unhealthy {
		health = "Unhealthy"
	}
	return astypes.Instance{
		InstanceId:           ptr(inst.id),
		AvailabilityZone:     ptr(inst.az),
		LifecycleState:       astypes.LifecycleState(inst.state),
		HealthStatus:         ptr(health),
		ProtectedFromScaleIn: ptr(inst.protected),
		InstanceType:         ptr(inst.instanceType),
		LaunchTemplate: &astypes.LaunchTemplateSpecification{
			LaunchTemplateId:   ptr(inst.ltID),
			LaunchTemplateName: ptr(inst.ltName),
			Version:            ptr(fmt.Sprint(inst.ltVersion)),
		},
	}
}

// groupNames returns the names of every group, sorted.
func (as *autoScalingService) groupNames() []string {
	names := make([]string, 0, len(as.groups))
	for n := range as.groups {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// group returns the named group, or nil.
func (as *autoScalingService) group(name string) *group { return as.groups[name] }

// reconcileGroups keeps every group at its desired capacity, in name order. It reports whether anything changed.
func (as *autoScalingService) reconcileGroups() bool {
	changed := false
	for _, name := range as.groupNames() {
		if as.reconcileGroup(as.groups[name]) {
			changed = true
		}
	}
	return changed
}

// completeAction records a completion of the lifecycle action by caller (accepted) and moves the instance on
// with result, as CompleteLifecycleAction does.
func (as *autoScalingService) completeAction(act *lifecycleAction, inst *instance, g *group, result, caller string) {
	as.completions = append(as.completions, Completion{Token: act.token, InstanceID: inst.id, Group: g.name,
		Hook: act.hook, Result: result, At: as.now(), Accepted: true, Caller: caller})
	as.resolveAction(act, result)
}
