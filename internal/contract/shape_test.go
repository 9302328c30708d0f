package contract

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/stretchr/testify/require"
)

// shape returns the paths of the members an SDK answer carries ("AutoScalingGroups[].Instances[].InstanceId"):
// set pointers, non-empty lists, maps and strings, non-zero numbers and times.
func shape(v any) map[string]bool {
	out := map[string]bool{}
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(path, v.Elem())
			}
		case reflect.Struct:
			if v.Type() == reflect.TypeOf(time.Time{}) {
				if !v.Interface().(time.Time).IsZero() {
					out[path] = true
				}
				return
			}
			for i := 0; i < v.NumField(); i++ {
				f := v.Type().Field(i)
				if f.IsExported() && f.Name != "ResultMetadata" {
					walk(path+"."+f.Name, v.Field(i))
				}
			}
		case reflect.Slice:
			for i := 0; i < v.Len(); i++ {
				walk(path+"[]", v.Index(i))
			}
		case reflect.Map:
			if v.Len() > 0 {
				out[path+"{}"] = true
			}
		default:
			if !v.IsZero() {
				out[path] = true
			}
		}
	}
	walk("", reflect.ValueOf(v))
	return out
}

// answers makes, in world w, the calls the agent makes of a group of 2 in cluster "prod" on amiOld, and
// returns each answer by operation.
func answers(t *testing.T, w *world) map[string]any {
	ctx := context.Background()
	id := newGroup(t, w, groupSpec{name: "g", min: 1, max: 3, desired: 2, tags: enabled, cluster: "prod"})
	w.settle(t)
	out := map[string]any{}
	groups, err := w.as.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{"g"}})
	require.NoError(t, err)
	out["DescribeAutoScalingGroups"] = groups
	ids := inService(groups.AutoScalingGroups[0])
	require.Len(t, ids, 2)
	instances, err := w.as.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: ids})
	require.NoError(t, err)
	out["DescribeAutoScalingInstances"] = instances
	created, err := w.ec2.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{LaunchTemplateId: aws.String(id),
		SourceVersion: aws.String("1"), VersionDescription: aws.String("contract"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(amiNew)}})
	require.NoError(t, err)
	out["CreateLaunchTemplateVersion"] = created
	versions, err := w.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(id),
		Versions: []string{"$Default", "2"}})
	require.NoError(t, err)
	out["DescribeLaunchTemplateVersions"] = versions
	reservations, err := w.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	require.NoError(t, err)
	out["DescribeInstances"] = reservations
	list, err := w.ecs.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("prod")})
	require.NoError(t, err)
	out["ListContainerInstances"] = list
	described, err := w.ecs.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("prod"),
		ContainerInstances: list.ContainerInstanceArns})
	require.NoError(t, err)
	out["DescribeContainerInstances"] = described
	return out
}

// reads are, for the answers whose shapes differ, the members the agent reads: both answers carry each of
// them. The other answers are compared member for member.
var reads = map[string][]string{
	"CreateLaunchTemplateVersion": {".LaunchTemplateVersion.LaunchTemplateId", ".LaunchTemplateVersion.VersionNumber",
		".LaunchTemplateVersion.LaunchTemplateData.ImageId"},
	"DescribeLaunchTemplateVersions": {".LaunchTemplateVersions[].LaunchTemplateId", ".LaunchTemplateVersions[].LaunchTemplateName",
		".LaunchTemplateVersions[].VersionNumber", ".LaunchTemplateVersions[].VersionDescription", ".LaunchTemplateVersions[].DefaultVersion",
		".LaunchTemplateVersions[].LaunchTemplateData.ImageId", ".LaunchTemplateVersions[].LaunchTemplateData.InstanceType"},
	"DescribeInstances": {".Reservations[].Instances[].InstanceId", ".Reservations[].Instances[].ImageId",
		".Reservations[].Instances[].InstanceType", ".Reservations[].Instances[].State.Name", ".Reservations[].Instances[].LaunchTime",
		".Reservations[].Instances[].Placement.AvailabilityZone"},
	"DescribeContainerInstances": {".ContainerInstances[].ContainerInstanceArn", ".ContainerInstances[].Ec2InstanceId",
		".ContainerInstances[].Status", ".ContainerInstances[].AgentConnected", ".ContainerInstances[].RegisteredAt"},
}

// The same SDK calls against moto and against the simulated account served over the wire come back in the
// same shape: Auto Scaling's and ECS's lists member for member; launch template versions, instances and
// container instances with every member the agent reads (moto fills EC2 networking members the simulation
// does not model; the log lists every difference).
func TestContractServedAnswersHaveMotosShape(t *testing.T) {
	moto := answers(t, motoWorld(t))
	served := answers(t, servedWorld(t))
	for op, m := range moto {
		ms, ss := shape(m), shape(served[op])
		var onlyMoto, onlyServed []string
		for p := range ms {
			if !ss[p] {
				onlyMoto = append(onlyMoto, p)
			}
		}
		for p := range ss {
			if !ms[p] {
				onlyServed = append(onlyServed, p)
			}
		}
		sort.Strings(onlyMoto)
		sort.Strings(onlyServed)
		t.Logf("%s: only moto %v; only served %v", op, onlyMoto, onlyServed)
		paths, ok := reads[op]
		if !ok {
			require.Equal(t, ms, ss, "%s: the same members", op)
			continue
		}
		for _, p := range paths {
			require.True(t, ms[p], "%s: moto's answer carries %s", op, p)
			require.True(t, ss[p], "%s: the served answer carries %s", op, p)
		}
	}
}
