package contract

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

const (
	amiOld = "ami-0aaaaaaaaaaaaaaa1"
	amiNew = "ami-0bbbbbbbbbbbbbbb2"
	// missingTemplateID has the form of a launch template id and names none.
	missingTemplateID = "lt-0123456789abcdef0"
	// missingInstanceID has the form of an instance id and names none.
	missingInstanceID = "i-0123456789abcdef0"
)

// enabled are the tags of an opted-in ECS group.
var enabled = map[string]string{model.TagEnabled: "true", model.TagPlatform: "ecs", model.TagCluster: "prod",
	model.TagParameter: "/golden/ecs/ami"}

func describeGroup(t *testing.T, w *world, name string) astypes.AutoScalingGroup {
	t.Helper()
	out, err := w.as.DescribeAutoScalingGroups(context.Background(), &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	require.NoError(t, err)
	require.Len(t, out.AutoScalingGroups, 1)
	return out.AutoScalingGroups[0]
}

// inService returns the ids of the group's InService instances, sorted.
func inService(g astypes.AutoScalingGroup) []string {
	var ids []string
	for _, i := range g.Instances {
		if i.LifecycleState == astypes.LifecycleStateInService {
			ids = append(ids, aws.ToString(i.InstanceId))
		}
	}
	sort.Strings(ids)
	return ids
}

// imageOf returns the AMI EC2 says the instance runs.
func imageOf(t *testing.T, w *world, id string) string {
	t.Helper()
	out, err := w.ec2.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	require.Len(t, out.Reservations, 1)
	require.Len(t, out.Reservations[0].Instances, 1)
	return aws.ToString(out.Reservations[0].Instances[0].ImageId)
}

func code(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// newGroup creates a template on amiOld and a group on it.
func newGroup(t *testing.T, w *world, spec groupSpec) (templateID string) {
	t.Helper()
	templateID = w.createTemplate(t, spec.name+"-lt", amiOld, "m6i.large")
	spec.templateID = templateID
	w.createGroup(t, spec)
	return templateID
}

// Discovery asks for the opted-in groups by tag filter, page by page (providers.Discover; 100 a page in
// production, 2 here so that paging is exercised with few groups).
func TestContractDiscoversGroupsByTagAcrossPages(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		for i := range 5 {
			tags := map[string]string{"team": "x"}
			if i%2 == 0 {
				tags = enabled
			}
			newGroup(t, w, groupSpec{name: fmt.Sprintf("g%d", i), min: 0, max: 2, desired: 0, tags: tags})
		}
		var names []string
		pages := 0
		in := &autoscaling.DescribeAutoScalingGroupsInput{MaxRecords: aws.Int32(2),
			Filters: []astypes.Filter{{Name: aws.String("tag:patch-agent/enabled"), Values: []string{"true"}}}}
		for {
			out, err := w.as.DescribeAutoScalingGroups(context.Background(), in)
			require.NoError(t, err)
			pages++
			for _, g := range out.AutoScalingGroups {
				names = append(names, aws.ToString(g.AutoScalingGroupName))
			}
			if aws.ToString(out.NextToken) == "" {
				break
			}
			in.NextToken = out.NextToken
			require.Less(t, pages, 10, "paging never ends")
		}
		sort.Strings(names)
		require.Equal(t, []string{"g0", "g2", "g4"}, names, "only the tagged groups, each once")
		require.Equal(t, 2, pages, "3 groups at 2 a page")

		found, err := providers.Discover(context.Background(), w.as)
		require.NoError(t, err)
		require.Equal(t, []string{"g0", "g2", "g4"}, found.Names())
		require.Empty(t, found.Misconfigured)
	})
}

// C11: the agent reads which version a group's reference resolves to ($Default, $Latest, a number) before it
// decides anything, and EC2 resolves $Default and $Latest as Auto Scaling does at launch.
func TestContractC11ResolvesDefaultLatestAndExplicitVersions(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		id := w.createTemplate(t, "lt", amiOld, "m6i.large")
		require.Equal(t, int64(2), w.addVersion(t, id, amiNew))
		tpl := providers.Templates{EC2: w.ec2, AutoScaling: w.as}
		for _, tc := range []struct {
			version string
			number  int64
			image   string
		}{{"$Default", 1, amiOld}, {"$Latest", 2, amiNew}, {"2", 2, amiNew}, {"1", 1, amiOld}} {
			got, err := tpl.Resolve(context.Background(), state.LaunchTemplateRef{ID: id, Version: tc.version})
			require.NoError(t, err, tc.version)
			require.Equal(t, tc.number, got.Number, tc.version)
			require.Equal(t, tc.image, got.ImageID, tc.version)
		}
		byName, err := tpl.Resolve(context.Background(), state.LaunchTemplateRef{Name: "lt", Version: "$Latest"})
		require.NoError(t, err)
		require.Equal(t, amiNew, byName.ImageID)
	})
}

// A missing template or version is an error with EC2's code, never an empty answer the agent could read as
// "no AMI".
func TestContractMissingTemplateAndVersionErrorCodes(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		id := w.createTemplate(t, "lt", amiOld, "m6i.large")
		tpl := providers.Templates{EC2: w.ec2, AutoScaling: w.as}
		for _, tc := range []struct {
			ref  state.LaunchTemplateRef
			code string
		}{
			{state.LaunchTemplateRef{ID: missingTemplateID, Version: "$Default"}, "InvalidLaunchTemplateId.NotFound"},
			{state.LaunchTemplateRef{Name: "no-such-template", Version: "$Default"}, "InvalidLaunchTemplateName.NotFoundException"},
			{state.LaunchTemplateRef{ID: id, Version: "9"}, "InvalidLaunchTemplateId.VersionNotFound"},
		} {
			_, err := tpl.Resolve(context.Background(), tc.ref)
			require.Error(t, err)
			require.Equal(t, tc.code, code(err), "%+v: %v", tc.ref, err)
			require.False(t, awsapi.IsInstanceNotFound(err), "a missing template is not a missing instance")
		}
	})
}

// C11: Preparing creates a copy of the resolved version with the target AMI, never changes the template's
// default version, and reuses that version after a crash — for a group's LaunchTemplate and for a mixed
// instances policy. The instance refresh's desired configuration names that version explicitly.
func TestContractC11NewVersionWithTheTargetAMI(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mixed=%v", mixed), func(t *testing.T) {
			run(t, func(t *testing.T, w *world) {
				ctx := context.Background()
				id := newGroup(t, w, groupSpec{name: "g", min: 1, max: 3, desired: 1, mixed: mixed, tags: enabled})
				ref, err := providers.TemplateRef(describeGroup(t, w, "g"))
				require.NoError(t, err)
				require.Equal(t, state.LaunchTemplateRef{ID: id, Name: "g-lt", Version: "$Default", MixedInstances: mixed}, ref)

				tpl := providers.Templates{EC2: w.ec2, AutoScaling: w.as}
				v, err := tpl.EnsureVersion(ctx, ref, amiNew, "contract")
				require.NoError(t, err)
				require.Equal(t, int64(2), v.Number)
				require.Equal(t, amiNew, v.ImageID)
				again, err := tpl.EnsureVersion(ctx, ref, amiNew, "contract")
				require.NoError(t, err)
				require.Equal(t, v.Number, again.Number, "a version the agent made for this AMI is reused, not made twice")

				def, err := tpl.Resolve(ctx, state.LaunchTemplateRef{ID: id, Version: "$Default"})
				require.NoError(t, err)
				require.Equal(t, int64(1), def.Number, "CreateLaunchTemplateVersion leaves the default version alone")

				if w.sim {
					// Amazon EC2 API Reference, CreateLaunchTemplateVersion: SourceVersion's data is the base of the
					// new version, so the instance type survives. moto 5.2.1 ignores SourceVersion.
					out, err := w.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
						LaunchTemplateId: aws.String(id), Versions: []string{"2"}})
					require.NoError(t, err)
					require.Equal(t, "m6i.large", string(out.LaunchTemplateVersions[0].LaunchTemplateData.InstanceType))
				}
			})
		})
	}
}

// A scale out by others (desired + 1) launches from the version the group was pointed at: the new instance runs
// the target AMI, the old ones keep theirs.
func TestContractScaleOutLaunchesOnTheTargetAMI(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		id := newGroup(t, w, groupSpec{name: "g", min: 2, max: 3, desired: 2, tags: enabled})
		before := inService(describeGroup(t, w, "g"))
		require.Len(t, before, 2)
		require.Equal(t, int64(2), w.addVersion(t, id, amiNew))
		_, err := w.others(t).UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("g"),
			LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(id), Version: aws.String("2")}})
		require.NoError(t, err)

		_, err = w.others(t).SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(3)})
		require.NoError(t, err)
		w.settle(t)
		g := describeGroup(t, w, "g")
		require.Equal(t, int32(3), aws.ToInt32(g.DesiredCapacity))
		after := inService(g)
		require.Len(t, after, 3)
		var launched []string
		for _, i := range after {
			if !slices.Contains(before, i) {
				launched = append(launched, i)
			}
		}
		require.Len(t, launched, 1, "exactly one new instance")
		require.Equal(t, amiNew, imageOf(t, w, launched[0]))
		for _, i := range before {
			require.Equal(t, amiOld, imageOf(t, w, i))
		}

		if w.sim {
			// Amazon EC2 Auto Scaling User Guide, "Set capacity limits on your Auto Scaling group": desired capacity
			// above the maximum is a ValidationError. moto accepts it.
			_, err = w.others(t).SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(4)})
			require.Equal(t, "ValidationError", code(err))
		}
	})
}

// TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity takes one off desired capacity and
// launches nothing; without it desired stays and a replacement is launched.
func TestContractTerminateWithAndWithoutDecrement(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		newGroup(t, w, groupSpec{name: "g", min: 1, max: 4, desired: 3, tags: enabled})
		ids := inService(describeGroup(t, w, "g"))
		require.Len(t, ids, 3)

		_, err := w.others(t).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
			InstanceId: aws.String(ids[0]), ShouldDecrementDesiredCapacity: aws.Bool(true)})
		require.NoError(t, err)
		w.settle(t)
		g := describeGroup(t, w, "g")
		require.Equal(t, int32(2), aws.ToInt32(g.DesiredCapacity))
		require.Equal(t, ids[1:], inService(g), "no replacement for a decrementing termination")

		_, err = w.others(t).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
			InstanceId: aws.String(ids[1]), ShouldDecrementDesiredCapacity: aws.Bool(false)})
		require.NoError(t, err)
		w.settle(t)
		g = describeGroup(t, w, "g")
		require.Equal(t, int32(2), aws.ToInt32(g.DesiredCapacity))
		now := inService(g)
		require.Len(t, now, 2)
		require.Contains(t, now, ids[2])
		require.NotContains(t, now, ids[1])
		require.NotContains(t, now, ids[0], "a replacement, not the terminated instance")

		out, err := w.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{ids[0]}})
		require.NoError(t, err)
		require.Equal(t, "terminated", string(out.Reservations[0].Instances[0].State.Name))

		if w.sim {
			// Amazon EC2 Auto Scaling API Reference, TerminateInstanceInAutoScalingGroup: decrementing below the
			// minimum is a ValidationError, and an unknown instance is "Instance Id not found". moto allows the
			// first and answers HTTP 500 to the second.
			_, err = w.others(t).UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("g"), MinSize: aws.Int32(2)})
			require.NoError(t, err)
			_, err = w.others(t).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
				InstanceId: aws.String(ids[2]), ShouldDecrementDesiredCapacity: aws.Bool(true)})
			require.Equal(t, "ValidationError", code(err))
			_, err = w.others(t).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
				InstanceId: aws.String(missingInstanceID), ShouldDecrementDesiredCapacity: aws.Bool(true)})
			require.True(t, awsapi.IsInstanceNotFound(err), "%v", err)
		}
	})
}

// Scale-in protection is set and cleared per instance and shows in DescribeAutoScalingGroups.
func TestContractScaleInProtection(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		newGroup(t, w, groupSpec{name: "g", min: 0, max: 3, desired: 2, tags: enabled})
		newGroup(t, w, groupSpec{name: "other", min: 0, max: 1, desired: 1})
		ids := inService(describeGroup(t, w, "g"))
		protected := func() map[string]bool {
			out := map[string]bool{}
			for _, i := range describeGroup(t, w, "g").Instances {
				out[aws.ToString(i.InstanceId)] = aws.ToBool(i.ProtectedFromScaleIn)
			}
			return out
		}
		set := func(id string, on bool) error {
			_, err := w.others(t).SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{AutoScalingGroupName: aws.String("g"),
				InstanceIds: []string{id}, ProtectedFromScaleIn: aws.Bool(on)})
			return err
		}
		require.NoError(t, set(ids[0], true))
		require.Equal(t, map[string]bool{ids[0]: true, ids[1]: false}, protected())
		require.NoError(t, set(ids[0], false))
		require.Equal(t, map[string]bool{ids[0]: false, ids[1]: false}, protected())

		if w.sim {
			// Amazon EC2 Auto Scaling API Reference, SetInstanceProtection: an instance that is not in the group is a
			// ValidationError. moto accepts it.
			other := inService(describeGroup(t, w, "other"))
			require.Equal(t, "ValidationError", code(set(other[0], true)))
		}
	})
}

// C7 and the drain: the container instance of an EC2 instance is found by its id (ListContainerInstances gives
// only ARNs), DRAINING shows in DescribeContainerInstances, an instance without one is ErrNotRegistered, and a
// container instance that is gone is a MISSING failure.
func TestContractC7ContainerInstanceLookupDrainingAndMissing(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		newGroup(t, w, groupSpec{name: "g", min: 3, max: 4, desired: 3, tags: enabled, cluster: "prod"})
		newGroup(t, w, groupSpec{name: "bare", min: 1, max: 1, desired: 1})
		w.settle(t)
		ids := inService(describeGroup(t, w, "g"))
		d := ecsdrain.New(w.ecs)

		all, err := d.FindAll(ctx, "prod")
		require.NoError(t, err)
		require.Len(t, all, 3)
		ci, err := d.Find(ctx, "prod", ids[1])
		require.NoError(t, err)
		require.Equal(t, ids[1], ci.EC2InstanceID)
		require.Equal(t, all[ids[1]].ARN, ci.ARN)
		require.True(t, ci.Healthy(), "ACTIVE and agent connected: %+v", ci)

		require.NoError(t, d.StartDrain(ctx, "prod", ci))
		require.NoError(t, d.StartDrain(ctx, "prod", ci), "DRAINING twice is a no-op")
		again, err := d.Find(ctx, "prod", ids[1])
		require.NoError(t, err)
		require.Equal(t, ecsdrain.StatusDraining, again.Status)
		other, err := d.Find(ctx, "prod", ids[0])
		require.NoError(t, err)
		require.Equal(t, ecsdrain.StatusActive, other.Status, "only the one drained")

		require.NoError(t, d.Undrain(ctx, "prod", ci))
		back, err := d.Find(ctx, "prod", ids[1])
		require.NoError(t, err)
		require.Equal(t, ecsdrain.StatusActive, back.Status)

		bare := inService(describeGroup(t, w, "bare"))
		_, err = d.Find(ctx, "prod", bare[0])
		require.ErrorIs(t, err, ecsdrain.ErrNotRegistered)

		gone := ci.ARN[:strings.LastIndex(ci.ARN, "/")+1] + "00000000-0000-4000-8000-000000000000"
		out, err := w.ecs.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("prod"),
			ContainerInstances: []string{ci.ARN, gone}})
		require.NoError(t, err)
		require.Len(t, out.ContainerInstances, 1)
		require.Len(t, out.Failures, 1)
		require.Equal(t, "MISSING", aws.ToString(out.Failures[0].Reason))
		err = d.StartDrain(ctx, "prod", ecsdrain.ContainerInstance{ARN: gone})
		require.ErrorIs(t, err, ecsdrain.ErrNotRegistered)

		_, err = w.ecs.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("no-such-cluster"),
			ContainerInstances: []string{ci.ARN}})
		require.Equal(t, "ClusterNotFoundException", code(err))
	})
}

// The error classification of awsapi/errors.go on the error responses the wire really carries.
func TestContractErrorClassificationOnRealErrorResponses(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		_, err := w.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{missingInstanceID}})
		require.Equal(t, "InvalidInstanceID.NotFound", code(err))
		require.True(t, awsapi.IsInstanceNotFound(err))
		require.False(t, awsapi.IsThrottled(err))
		require.False(t, awsapi.IsNoActiveLifecycleAction(err))

		_, err = w.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
			LaunchTemplateId: aws.String(missingTemplateID), Versions: []string{"$Default"}})
		require.Error(t, err)
		require.False(t, awsapi.IsInstanceNotFound(err))

		if w.sim {
			// Amazon EC2 Auto Scaling API Reference, CompleteLifecycleAction: a token that is not active is
			// ValidationError "No active Lifecycle Action found with token ..." (field case C6). moto does not
			// implement CompleteLifecycleAction or RecordLifecycleActionHeartbeat (HTTP 500).
			newGroup(t, w, groupSpec{name: "g", min: 0, max: 1, desired: 0})
			_, err = w.as.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String("g"),
				LifecycleHookName: aws.String("drain"), LifecycleActionToken: aws.String("c0ffee00-0000-4000-8000-000000000000"),
				LifecycleActionResult: aws.String("CONTINUE")})
			require.True(t, awsapi.IsNoActiveLifecycleAction(err), "%v", err)
			_, err = w.as.RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{AutoScalingGroupName: aws.String("g"),
				LifecycleHookName: aws.String("drain"), LifecycleActionToken: aws.String("c0ffee00-0000-4000-8000-000000000000")})
			require.True(t, awsapi.IsNoActiveLifecycleAction(err), "%v", err)
		}
	})
}

// C19's confirmation call: DescribeAutoScalingInstances names each instance's group and lifecycle state, leaves
// out ids Auto Scaling does not know (no error), and refuses more than 50 ids (Amazon EC2 Auto Scaling API
// Reference, DescribeAutoScalingInstances: "InstanceIds ... Array Members: Maximum number of 50 items").
func TestContractC19DescribeAutoScalingInstancesNamesGroupAndState(t *testing.T) {
	run(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		newGroup(t, w, groupSpec{name: "g", min: 0, max: 3, desired: 2, tags: enabled})
		newGroup(t, w, groupSpec{name: "other", min: 0, max: 1, desired: 1})
		ids := inService(describeGroup(t, w, "g"))
		other := inService(describeGroup(t, w, "other"))
		out, err := w.as.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{
			InstanceIds: []string{ids[0], other[0], "i-0000000000000dead"}})
		require.NoError(t, err)
		got := map[string]string{}
		for _, i := range out.AutoScalingInstances {
			got[aws.ToString(i.InstanceId)] = aws.ToString(i.AutoScalingGroupName) + "/" + aws.ToString(i.LifecycleState)
		}
		require.Equal(t, map[string]string{ids[0]: "g/InService", other[0]: "other/InService"}, got,
			"each known instance with its group and state; the unknown id is left out")
		if w.sim {
			// moto does not enforce the 50-id limit; the simulation follows the API reference.
			many := make([]string, 51)
			for i := range many {
				many[i] = fmt.Sprintf("i-%017d", i)
			}
			_, err := w.as.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: many})
			require.Equal(t, "ValidationError", code(err))
		}
	})
}

// The room check (ecsdrain.Room) reads a container instance's host ports from remainingResources PORTS (Amazon
// ECS API Reference, "ContainerInstance": the ports the ECS container agent reserved at registration and those
// task containers hold). A freshly registered container instance lists the agent's default reserved ports
// (Developer Guide, "Amazon ECS container agent configuration", ECS_RESERVED_PORTS: 22, 2375, 2376, 51678,
// 51679) in registeredResources and remainingResources alike, in the simulation as on the wire.
func TestContractContainerInstancePortsListTheAgentsReservedPorts(t *testing.T) {
	reserved := []string{"22", "2375", "2376", "51678", "51679"}
	run(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		newGroup(t, w, groupSpec{name: "g", min: 1, max: 1, desired: 1, tags: enabled, cluster: "prod"})
		w.settle(t)
		all, err := ecsdrain.New(w.ecs).FindAll(ctx, "prod")
		require.NoError(t, err)
		require.Len(t, all, 1)
		for _, ci := range all {
			require.ElementsMatch(t, reserved, ci.HeldPorts, "remainingResources PORTS of an instance without tasks")
			out, err := w.ecs.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("prod"),
				ContainerInstances: []string{ci.ARN}})
			require.NoError(t, err)
			require.Len(t, out.ContainerInstances, 1)
			var registered []string
			for _, r := range out.ContainerInstances[0].RegisteredResources {
				if aws.ToString(r.Name) == "PORTS" {
					registered = r.StringSetValue
				}
			}
			require.ElementsMatch(t, reserved, registered, "registeredResources PORTS")
		}
	})
}
