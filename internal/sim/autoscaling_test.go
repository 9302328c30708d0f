package sim

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

func requireAPIError(t *testing.T, err error, code, message string) {
	t.Helper()
	var apiErr smithy.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, code, apiErr.ErrorCode())
	require.Contains(t, apiErr.ErrorMessage(), message)
}

func TestLaunchTemplateVersionResolution(t *testing.T) {
	cases := []struct {
		name     string
		version  string
		mixed    bool
		wantAMI  string
		wantUsed string
	}{
		{name: "$Default resolves to the default version, not the latest", version: "$Default", wantAMI: "ami-v1", wantUsed: "1"},
		{name: "empty version means $Default", version: "", wantAMI: "ami-v1", wantUsed: "1"},
		{name: "$Latest resolves to the highest version", version: "$Latest", wantAMI: "ami-v3", wantUsed: "3"},
		{name: "explicit version number", version: "2", wantAMI: "ami-v2", wantUsed: "2"},
		{name: "mixed instances policy $Latest", version: "$Latest", mixed: true, wantAMI: "ami-v3", wantUsed: "3"},
		{name: "mixed instances policy $Default", version: "$Default", mixed: true, wantAMI: "ami-v1", wantUsed: "1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newAccount(t)
			lt := a.CreateLaunchTemplate("lt", "ami-v1", "m6i.large")
			a.CreateLaunchTemplateVersion(lt, "ami-v2")
			a.CreateLaunchTemplateVersion(lt, "ami-v3")
			require.NoError(t, a.CreateGroup(GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 1, LaunchTemplateID: lt,
				LaunchTemplateVersion: tc.version, MixedInstances: tc.mixed}))

			inst := a.Group("g").Instances[0]
			require.Equal(t, tc.wantAMI, inst.ImageID)
			require.Equal(t, tc.wantUsed, inst.LaunchTemplateVersion)

			g := describeGroup(t, a, "g")
			require.Equal(t, tc.wantUsed, aws.ToString(g.Instances[0].LaunchTemplate.Version))
			if tc.mixed {
				require.Nil(t, g.LaunchTemplate)
				require.Equal(t, lt, aws.ToString(g.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification.LaunchTemplateId))
			} else {
				require.Nil(t, g.MixedInstancesPolicy)
				require.Equal(t, lt, aws.ToString(g.LaunchTemplate.LaunchTemplateId))
			}
		})
	}
}

func TestCreateLaunchTemplateVersionKeepsTheDefault(t *testing.T) {
	a := newAccount(t)
	ctx := context.Background()
	lt := newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 1})

	out, err := a.EC2().CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
		LaunchTemplateId: aws.String(lt), SourceVersion: aws.String("1"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String("ami-new")},
	})
	require.NoError(t, err)
	require.Equal(t, int64(2), aws.ToInt64(out.LaunchTemplateVersion.VersionNumber))
	require.False(t, aws.ToBool(out.LaunchTemplateVersion.DefaultVersion))
	require.Equal(t, ec2types.InstanceType("m6i.large"), out.LaunchTemplateVersion.LaunchTemplateData.InstanceType, "copied from the source version")

	desc, err := a.EC2().DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
		LaunchTemplateId: aws.String(lt), Versions: []string{"$Default", "$Latest"}})
	require.NoError(t, err)
	require.Len(t, desc.LaunchTemplateVersions, 2)
	require.Equal(t, "ami-old", aws.ToString(desc.LaunchTemplateVersions[0].LaunchTemplateData.ImageId))
	require.True(t, aws.ToBool(desc.LaunchTemplateVersions[0].DefaultVersion))
	require.Equal(t, "ami-new", aws.ToString(desc.LaunchTemplateVersions[1].LaunchTemplateData.ImageId))

	// A scale out on $Default still launches the old AMI (field case C11) ...
	a.SetDesiredCapacity("g", 2)
	a.Advance(2 * time.Minute)
	require.Equal(t, "ami-old", a.Group("g").Instances[1].ImageID)

	// ... until the group points at the explicit version.
	_, err = a.AutoScaling().(*AutoScalingClient).UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{
		AutoScalingGroupName: aws.String("g"),
		LaunchTemplate:       &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(lt), Version: aws.String("2")},
		DesiredCapacity:      aws.Int32(3),
	})
	require.NoError(t, err)
	g := a.Group("g")
	require.Equal(t, "ami-new", g.Instances[2].ImageID)
	require.Equal(t, "2", g.Instances[2].LaunchTemplateVersion)
	require.Equal(t, int32(3), g.Max, "only the fields given change")

	_, err = a.EC2().DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(lt), Versions: []string{"9"}})
	requireAPIError(t, err, "InvalidLaunchTemplateId.VersionNotFound", "9")
}

func TestScaleOutLaunchBootsAndRegisters(t *testing.T) {
	a := newAccount(t)
	ctx := context.Background()
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 2, ECSCluster: "prod"})
	before := a.Group("g")
	require.Equal(t, map[string]int{"InService": 2}, states(before))
	for _, i := range before.Instances {
		require.Equal(t, "ACTIVE", i.ContainerInstanceStatus, "initial instances are registered at creation")
		require.True(t, i.AgentConnected)
	}

	_, err := asClient(a).SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(3)})
	require.NoError(t, err)
	launched := a.Group("g").Instances[2]
	require.Equal(t, "Pending", launched.LifecycleState)
	require.Equal(t, "pending", launched.EC2State)

	a.Advance(89 * time.Second)
	launched, _ = a.Instance(launched.ID)
	require.Equal(t, "Pending", launched.LifecycleState)

	a.Advance(time.Second)
	launched, _ = a.Instance(launched.ID)
	require.Equal(t, "InService", launched.LifecycleState)
	require.Empty(t, launched.ContainerInstanceStatus, "the agent has not connected yet")

	a.Advance(20 * time.Second)
	launched, _ = a.Instance(launched.ID)
	require.Equal(t, "ACTIVE", launched.ContainerInstanceStatus)
	require.True(t, launched.AgentConnected)

	azs := map[string]bool{}
	for _, i := range a.Group("g").Instances {
		azs[i.AvailabilityZone] = true
	}
	require.Len(t, azs, 3, "instances are balanced across Availability Zones")

	_, err = asClient(a).SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(4)})
	requireAPIError(t, err, "ValidationError", "New SetDesiredCapacity value 4 is above max value 3 for the AutoScalingGroup.")
}

func TestUnhealthyImageNeverRegisters(t *testing.T) {
	a := newAccount(t)
	lt := newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 2, Desired: 1, ECSCluster: "prod", LaunchTemplateVersion: "$Latest"})
	a.CreateLaunchTemplateVersion(lt, "ami-bad")
	a.MarkImageUnhealthy("ami-bad")
	a.SetDesiredCapacity("g", 2)

	a.Advance(10 * time.Minute)

	bad := a.Group("g").Instances[1]
	require.Equal(t, "ami-bad", bad.ImageID)
	require.Equal(t, "InService", bad.LifecycleState)
	require.Empty(t, bad.ContainerInstanceARN)
	require.False(t, bad.AgentConnected)
}

func TestTerminateInstanceInAutoScalingGroup(t *testing.T) {
	ctx := context.Background()
	terminate := func(a *Account, id string, decrement bool) (*autoscaling.TerminateInstanceInAutoScalingGroupOutput, error) {
		return a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
			InstanceId: aws.String(id), ShouldDecrementDesiredCapacity: aws.Bool(decrement)})
	}

	t.Run("decrement lowers desired and the instance terminates", func(t *testing.T) {
		a := newAccount(t)
		newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 2})
		victim := a.Group("g").Instances[0].ID

		out, err := terminate(a, victim, true)
		require.NoError(t, err)
		require.Contains(t, aws.ToString(out.Activity.Cause), "shrinking the capacity from 2 to 1")
		g := a.Group("g")
		require.Equal(t, int32(1), g.Desired)
		require.Len(t, g.Instances, 2)
		v, _ := a.Instance(victim)
		require.Equal(t, "Terminating:Proceed", v.LifecycleState)
		require.Equal(t, "shutting-down", v.EC2State)

		a.Advance(30 * time.Second)
		v, _ = a.Instance(victim)
		require.Equal(t, "Terminated", v.LifecycleState)
		require.Len(t, a.Group("g").Instances, 1)

		desc, err := a.EC2().DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{victim}})
		require.NoError(t, err)
		require.Equal(t, ec2types.InstanceStateNameTerminated, desc.Reservations[0].Instances[0].State.Name, "terminated instances stay visible")
		require.Equal(t, []Termination{{InstanceID: victim, Group: "g", Cause: CauseAPI, RequestedAt: start, DrainedAtRequest: true, Proceeded: true, DrainedAtProceed: true, ProceededAt: start}}, a.Terminations())
	})

	t.Run("decrement below min is a ValidationError", func(t *testing.T) {
		a := newAccount(t)
		newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 2, Desired: 1})
		_, err := terminate(a, a.Group("g").Instances[0].ID, true)
		requireAPIError(t, err, "ValidationError", "Currently, desiredSize equals minSize (1). Terminating instance without replacement will violate group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group's min size.")
		require.Empty(t, a.Terminations())
	})

	t.Run("without decrement a replacement launches", func(t *testing.T) {
		a := newAccount(t)
		newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 2, Desired: 1})
		_, err := terminate(a, a.Group("g").Instances[0].ID, false)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"Terminating:Proceed": 1, "Pending": 1}, states(a.Group("g")))
		a.Advance(2 * time.Minute)
		require.Equal(t, map[string]int{"InService": 1}, states(a.Group("g")))
	})

	t.Run("unknown instance", func(t *testing.T) {
		a := newAccount(t)
		_, err := terminate(a, "i-0123456789abcdef0", true)
		requireAPIError(t, err, "ValidationError", "Instance Id not found - No managed instance found for instance ID: i-0123456789abcdef0")
		require.True(t, awsapi.IsInstanceNotFound(err))
	})

	t.Run("an instance already terminating is not terminated twice", func(t *testing.T) {
		a := newAccount(t)
		newGroup(t, a, GroupSpec{Name: "g", Min: 0, Max: 3, Desired: 2})
		victim := a.Group("g").Instances[0].ID
		_, err := terminate(a, victim, true)
		require.NoError(t, err)
		out, err := terminate(a, victim, true)
		require.NoError(t, err)
		require.NotNil(t, out.Activity)
		require.Equal(t, int32(1), a.Group("g").Desired, "desired dropped once")
		require.Len(t, a.Terminations(), 1)
	})
}

func TestTerminatingHook(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*Account, string) {
		a := newAccount(t)
		q := a.CreateQueue("agent", 0, "")
		newGroup(t, a, GroupSpec{Name: "g", Min: 0, Max: 3, Desired: 2, Hooks: []HookSpec{{
			Name: "drain", Transition: TransitionTerminating, HeartbeatTimeout: 300 * time.Second, QueueURL: q,
			NotificationMetadata: `{"cluster":"prod"}`}}})
		return a, q
	}
	receive := func(t *testing.T, a *Account, q string) map[string]any {
		out, err := a.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), MaxNumberOfMessages: 10})
		require.NoError(t, err)
		require.Len(t, out.Messages, 1)
		_, err = a.SQS().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: out.Messages[0].ReceiptHandle})
		require.NoError(t, err)
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(aws.ToString(out.Messages[0].Body)), &body))
		return body
	}
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}

	t.Run("test notification, wait, heartbeat, completion", func(t *testing.T) {
		a, q := setup(t)
		test := receive(t, a, q)
		require.Equal(t, "autoscaling:TEST_NOTIFICATION", test["Event"])
		require.Equal(t, []string{"AccountId", "AutoScalingGroupARN", "AutoScalingGroupName", "Event", "RequestId", "Service", "Time"}, keys(test))

		victim := a.Group("g").Instances[0].ID
		_, err := a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
			InstanceId: aws.String(victim), ShouldDecrementDesiredCapacity: aws.Bool(true)})
		require.NoError(t, err)
		v, _ := a.Instance(victim)
		require.Equal(t, "Terminating:Wait", v.LifecycleState)
		require.Equal(t, "running", v.EC2State)

		n := receive(t, a, q)
		require.Equal(t, []string{"AccountId", "AutoScalingGroupName", "Destination", "EC2InstanceId", "LifecycleActionToken",
			"LifecycleHookName", "LifecycleTransition", "NotificationMetadata", "Origin", "RequestId", "Service", "Time"}, keys(n))
		require.Equal(t, "AutoScalingGroup", n["Origin"])
		require.Equal(t, "EC2", n["Destination"])
		require.Equal(t, TransitionTerminating, n["LifecycleTransition"])
		require.Equal(t, victim, n["EC2InstanceId"])
		require.Equal(t, "2024-03-04T09:00:00.000Z", n["Time"])
		token := n["LifecycleActionToken"].(string)

		a.Advance(200 * time.Second)
		_, err = a.AutoScaling().RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{
			AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("drain"), LifecycleActionToken: aws.String(token)})
		require.NoError(t, err)
		a.Advance(200 * time.Second) // 400s after the start: past the first timeout, not past the heartbeat's
		v, _ = a.Instance(victim)
		require.Equal(t, "Terminating:Wait", v.LifecycleState, "the heartbeat restarted the timeout")

		_, err = a.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
			AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("drain"), LifecycleActionToken: aws.String(token),
			LifecycleActionResult: aws.String("CONTINUE")})
		require.NoError(t, err)
		v, _ = a.Instance(victim)
		require.Equal(t, "Terminating:Proceed", v.LifecycleState)
		a.Advance(30 * time.Second)
		v, _ = a.Instance(victim)
		require.Equal(t, "Terminated", v.LifecycleState)

		require.Len(t, a.Heartbeats(), 1)
		require.Equal(t, []Completion{{Token: token, InstanceID: victim, Group: "g", Hook: "drain", Result: "CONTINUE",
			At: start.Add(400 * time.Second), Accepted: true, Caller: CallerAPI, Transition: TransitionTerminating, Drained: true,
			LifecycleState: "Terminating:Wait"}}, a.LifecycleCompletions())

		// Field case C6: a second completion of the same token.
		_, err = a.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
			AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("drain"), LifecycleActionToken: aws.String(token),
			LifecycleActionResult: aws.String("CONTINUE")})
		requireAPIError(t, err, "ValidationError", "No active Lifecycle Action found with token "+token)
		require.True(t, awsapi.IsNoActiveLifecycleAction(err))
		require.False(t, a.LifecycleCompletions()[1].Accepted)
	})

	t.Run("heartbeat timeout applies the default result", func(t *testing.T) {
		a, q := setup(t)
		_ = receive(t, a, q)
		a.SetDesiredCapacity("g", 1) // scale-in goes through the terminating hook too
		n := receive(t, a, q)
		victim := n["EC2InstanceId"].(string)

		a.Advance(299 * time.Second)
		v, _ := a.Instance(victim)
		require.Equal(t, "Terminating:Wait", v.LifecycleState)
		a.Advance(time.Second)
		v, _ = a.Instance(victim)
		require.Equal(t, "Terminating:Proceed", v.LifecycleState)
		require.Equal(t, CauseScaleIn, a.Terminations()[0].Cause)

		_, err := a.AutoScaling().RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{
			AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("drain"), LifecycleActionToken: aws.String(n["LifecycleActionToken"].(string))})
		require.True(t, awsapi.IsNoActiveLifecycleAction(err), "the action timed out")
	})

	t.Run("completion by instance id", func(t *testing.T) {
		a, _ := setup(t)
		victim := a.Group("g").Instances[1].ID
		_, err := a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
			InstanceId: aws.String(victim), ShouldDecrementDesiredCapacity: aws.Bool(true)})
		require.NoError(t, err)
		_, err = a.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
			AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("drain"), InstanceId: aws.String(victim),
			LifecycleActionResult: aws.String("ABANDON")})
		require.NoError(t, err)
		v, _ := a.Instance(victim)
		require.Equal(t, "Terminating:Proceed", v.LifecycleState, "ABANDON also lets a terminating instance terminate")
	})

	t.Run("unknown token", func(t *testing.T) {
		a, _ := setup(t)
		_, err := a.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
			AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("drain"),
			LifecycleActionToken: aws.String("5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13"), LifecycleActionResult: aws.String("CONTINUE")})
		requireAPIError(t, err, "ValidationError", "No active Lifecycle Action found with token 5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13")
	})
}

func TestLaunchingHook(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T, defaultResult string) (*Account, string) {
		a := newAccount(t)
		q := a.CreateQueue("agent", 0, "")
		newGroup(t, a, GroupSpec{Name: "g", Min: 0, Max: 3, Desired: 1, ECSCluster: "prod", Hooks: []HookSpec{{
			Name: "launch", Transition: TransitionLaunching, HeartbeatTimeout: 600 * time.Second, DefaultResult: defaultResult, QueueURL: q}}})
		a.SetDesiredCapacity("g", 2)
		a.Advance(90 * time.Second)
		return a, a.Group("g").Instances[1].ID
	}
	complete := func(a *Account, id, result string) error {
		_, err := a.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
			AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("launch"), InstanceId: aws.String(id),
			LifecycleActionResult: aws.String(result)})
		return err
	}

	t.Run("waits in Pending:Wait, registers with ECS, CONTINUE puts it in service", func(t *testing.T) {
		a, id := setup(t, "")
		v, _ := a.Instance(id)
		require.Equal(t, "Pending:Wait", v.LifecycleState)
		msgs := a.QueueMessages("https://sqs.us-east-1.amazonaws.com/111122223333/agent")
		require.Len(t, msgs, 2) // test notification, then the launching action
		require.Contains(t, msgs[1], `"Origin":"EC2","LifecycleHookName":"launch","Destination":"AutoScalingGroup"`)

		a.Advance(20 * time.Second)
		v, _ = a.Instance(id)
		require.Equal(t, "ACTIVE", v.ContainerInstanceStatus, "the agent registers during Pending:Wait")
		require.NoError(t, complete(a, id, "CONTINUE"))
		v, _ = a.Instance(id)
		require.Equal(t, "InService", v.LifecycleState)
	})

	t.Run("ABANDON terminates and a replacement launches", func(t *testing.T) {
		a, id := setup(t, "")
		require.NoError(t, complete(a, id, "ABANDON"))
		v, _ := a.Instance(id)
		require.Equal(t, "Terminating:Proceed", v.LifecycleState)
		require.Equal(t, CauseAbandon, a.Terminations()[0].Cause)
		require.Equal(t, map[string]int{"InService": 1, "Terminating:Proceed": 1, "Pending": 1}, states(a.Group("g")))
	})

	t.Run("timeout with DefaultResult ABANDON", func(t *testing.T) {
		a, id := setup(t, "ABANDON")
		a.Advance(600 * time.Second)
		v, _ := a.Instance(id)
		require.Equal(t, "Terminating:Proceed", v.LifecycleState)
		require.Equal(t, CauseAbandon, a.Terminations()[0].Cause)
	})
}

func TestScaleInRespectsProtectionAndTerminationPolicy(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	lt := newGroup(t, a, GroupSpec{Name: "g", Min: 0, Max: 6, Desired: 3, LaunchTemplateVersion: "$Latest"})
	old := a.Group("g").Instances
	a.CreateLaunchTemplateVersion(lt, "ami-new")
	a.SetDesiredCapacity("g", 6)
	a.Advance(2 * time.Minute)

	// Protect every old instance but the one in us-east-1b.
	var protect []string
	for _, i := range old {
		if i.AvailabilityZone != "us-east-1b" {
			protect = append(protect, i.ID)
		}
	}
	_, err := asClient(a).SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{
		AutoScalingGroupName: aws.String("g"), InstanceIds: protect, ProtectedFromScaleIn: aws.Bool(true)})
	require.NoError(t, err)

	a.SetDesiredCapacity("g", 5)
	term := a.Terminations()
	require.Len(t, term, 1)
	v, _ := a.Instance(term[0].InstanceID)
	require.Equal(t, "ami-old", v.ImageID, "instances from the oldest launch template version go first")
	require.Equal(t, "us-east-1b", v.AvailabilityZone)

	a.SetDesiredCapacity("g", 0)
	g := a.Group("g")
	for _, i := range g.Instances {
		if i.LifecycleState == "InService" {
			require.True(t, i.ProtectedFromScaleIn, "only protected instances survive scale-in")
		}
	}
	require.Equal(t, 2, states(g)["InService"])

	_, err = asClient(a).SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{
		AutoScalingGroupName: aws.String("g"), InstanceIds: []string{"i-00000000000000000"}, ProtectedFromScaleIn: aws.Bool(false)})
	requireAPIError(t, err, "ValidationError", "The instance i-00000000000000000 is not part of Auto Scaling group g.")
}

func TestUpdateAutoScalingGroupCapacity(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 1})
	update := func(in autoscaling.UpdateAutoScalingGroupInput) error {
		in.AutoScalingGroupName = aws.String("g")
		_, err := a.AutoScaling().(*AutoScalingClient).UpdateAutoScalingGroup(ctx, &in)
		return err
	}

	require.NoError(t, update(autoscaling.UpdateAutoScalingGroupInput{MinSize: aws.Int32(2)}))
	g := a.Group("g")
	require.Equal(t, int32(2), g.Desired, "a new min above desired raises desired")
	require.Len(t, g.Instances, 2)

	require.NoError(t, update(autoscaling.UpdateAutoScalingGroupInput{MaxSize: aws.Int32(4), MinSize: aws.Int32(1)}))
	require.Equal(t, int32(2), a.Group("g").Desired)

	err := update(autoscaling.UpdateAutoScalingGroupInput{DesiredCapacity: aws.Int32(5)})
	requireAPIError(t, err, "ValidationError", "Desired capacity:5 must be between the specified min size:1 and max size:4")

	err = update(autoscaling.UpdateAutoScalingGroupInput{MinSize: aws.Int32(5)})
	requireAPIError(t, err, "ValidationError", "Max bound, 4, must be greater than or equal to min bound, 5")
}

func TestDescribeAutoScalingGroupsFiltersAndPages(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	lt := a.CreateLaunchTemplate("lt", "ami-old", "m6i.large")
	for i := 0; i < 5; i++ {
		tags := map[string]string{"team": "x"}
		if i%2 == 0 {
			tags["patch-agent/enabled"] = "true"
		}
		require.NoError(t, a.CreateGroup(GroupSpec{Name: string(rune('a' + i)), Min: 0, Max: 1, Desired: 0, LaunchTemplateID: lt, Tags: tags}))
	}

	var names []string
	in := &autoscaling.DescribeAutoScalingGroupsInput{MaxRecords: aws.Int32(2),
		Filters: []astypes.Filter{{Name: aws.String("tag:patch-agent/enabled"), Values: []string{"true"}}}}
	for {
		out, err := a.AutoScaling().DescribeAutoScalingGroups(ctx, in)
		require.NoError(t, err)
		for _, g := range out.AutoScalingGroups {
			names = append(names, aws.ToString(g.AutoScalingGroupName))
		}
		if out.NextToken == nil {
			break
		}
		in.NextToken = out.NextToken
	}
	require.Equal(t, []string{"a", "c", "e"}, names)

	out, err := a.AutoScaling().DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{
		Filters: []astypes.Filter{{Name: aws.String("tag-key"), Values: []string{"patch-agent/enabled"}}}})
	require.NoError(t, err)
	require.Len(t, out.AutoScalingGroups, 3)

	_, err = a.AutoScaling().DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{MaxRecords: aws.Int32(101)})
	requireAPIError(t, err, "ValidationError", "maxRecords")
}

func TestHealthCheckReplacement(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 2, Desired: 1})
	id := a.Group("g").Instances[0].ID
	require.True(t, a.MarkInstanceUnhealthy(id))
	require.Equal(t, CauseHealth, a.Terminations()[0].Cause)
	require.Equal(t, map[string]int{"Terminating:Proceed": 1, "Pending": 1}, states(a.Group("g")))
}
