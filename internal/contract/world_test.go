package contract

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/sim/wire"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// groupSpec is an Auto Scaling group to create in a world, as a user would.
type groupSpec struct {
	name              string
	min, max, desired int32
	templateID        string
	// version is the launch template version the group references: "$Default", "$Latest" or a number.
	version string
	mixed   bool
	tags    map[string]string
	// cluster is the ECS cluster the instances' container agent registers in ("" = none).
	cluster string
}

// world is one AWS account the scenarios run in: the agent's interfaces, and the setup a user (or AWS itself,
// or the ECS agent on an instance) does, which the agent never does.
type world struct {
	name string
	// sim is set for internal/sim; assertions on behaviour moto does not have run only there.
	sim bool
	// account is the simulated account of the sim and served worlds.
	account *sim.Account
	as      awsapi.AutoScaling
	ec2     awsapi.EC2
	ecs     awsapi.ECS

	createTemplate func(t *testing.T, name, imageID, instanceType string) (templateID string)
	// addVersion creates a version copying version 1 with imageID; the default version stays.
	addVersion  func(t *testing.T, templateID, imageID string) int64
	createGroup func(t *testing.T, spec groupSpec)
	// settle lets the account catch up: launched instances boot and their ECS agents register their
	// container instances; terminated ones finish shutting down.
	settle func(t *testing.T)
}

// othersAutoScaling are the Auto Scaling calls that users and autoscalers make and the agent never does: every
// world's Auto Scaling client serves them beside the agent's interface.
type othersAutoScaling interface {
	SetDesiredCapacity(ctx context.Context, in *autoscaling.SetDesiredCapacityInput, optFns ...func(*autoscaling.Options)) (*autoscaling.SetDesiredCapacityOutput, error)
	SetInstanceProtection(ctx context.Context, in *autoscaling.SetInstanceProtectionInput, optFns ...func(*autoscaling.Options)) (*autoscaling.SetInstanceProtectionOutput, error)
	UpdateAutoScalingGroup(ctx context.Context, in *autoscaling.UpdateAutoScalingGroupInput, optFns ...func(*autoscaling.Options)) (*autoscaling.UpdateAutoScalingGroupOutput, error)
	TerminateInstanceInAutoScalingGroup(ctx context.Context, in *autoscaling.TerminateInstanceInAutoScalingGroupInput, optFns ...func(*autoscaling.Options)) (*autoscaling.TerminateInstanceInAutoScalingGroupOutput, error)
}

// others returns the world's Auto Scaling client as a user or an autoscaler calls it.
func (w *world) others(t *testing.T) othersAutoScaling {
	t.Helper()
	c, ok := w.as.(othersAutoScaling)
	require.True(t, ok, "%T serves the calls of users and autoscalers", w.as)
	return c
}

// worlds are the simulation in process, the simulation served over the AWS wire protocols (internal/sim/wire,
// what the real binary talks to in internal/e2e) and moto (skipped without moto_server, failed when $CI is
// set). The served world asserts what the in-process one does: the same SDK call yields the same answer
// through the wire as in process, and the shape moto gives it.
var worlds = []struct {
	name string
	make func(t *testing.T) *world
}{{"sim", simWorld}, {"served", servedWorld}, {"moto", motoWorld}}

// run runs scenario on every world, each as a subtest named by the world.
func run(t *testing.T, scenario func(t *testing.T, w *world)) {
	for _, w := range worlds {
		t.Run(w.name, func(t *testing.T) { scenario(t, w.make(t)) })
	}
}

var simStart = time.Date(2024, 3, 4, 9, 0, 0, 0, time.UTC)

func simWorld(t *testing.T) *world {
	a := sim.New(testingclock.NewFakeClock(simStart), sim.Options{})
	ec2c := a.EC2().(*sim.EC2Client)
	return &world{
		name: "sim", sim: true, account: a, as: a.AutoScaling(), ec2: ec2c, ecs: a.ECS(),
		createTemplate: func(t *testing.T, name, imageID, instanceType string) string {
			return a.CreateLaunchTemplate(name, imageID, instanceType)
		},
		addVersion: func(t *testing.T, id, imageID string) int64 { return a.CreateLaunchTemplateVersion(id, imageID) },
		createGroup: func(t *testing.T, s groupSpec) {
			require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: s.name, Min: s.min, Max: s.max, Desired: s.desired,
				LaunchTemplateID: s.templateID, LaunchTemplateVersion: s.version, MixedInstances: s.mixed, Tags: s.tags,
				ECSCluster: s.cluster}))
		},
		settle: func(t *testing.T) { a.Advance(5 * time.Minute) },
	}
}

// servedWorld is simWorld with the agent's interfaces as SDK clients of the account served on localhost.
func servedWorld(t *testing.T) *world {
	w := simWorld(t)
	a := w.account
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := wire.Start(ctx, a)
	require.NoError(t, err)
	t.Cleanup(func() { require.Empty(t, srv.Unknown(), "calls the served account could not serve") })
	cfg := testenv.AWSConfig(srv.URL)
	w.name, w.as, w.ec2, w.ecs = "served", autoscaling.NewFromConfig(cfg), ec2.NewFromConfig(cfg), ecs.NewFromConfig(cfg)
	return w
}

func motoWorld(t *testing.T) *world {
	endpoint := testenv.Moto(t)
	cfg := testenv.AWSConfig(endpoint)
	cfg.Retryer = func() aws.Retryer { return retry.NewStandard() } // Werkzeug drops a keep-alive connection now and then
	asc, ec2c, ecsc := autoscaling.NewFromConfig(cfg), ec2.NewFromConfig(cfg), ecs.NewFromConfig(cfg)
	ctx := context.Background()
	clusterOf := map[string]string{}
	registered := map[string]bool{}
	return &world{
		name: "moto", as: asc, ec2: ec2c, ecs: ecsc,
		createTemplate: func(t *testing.T, name, imageID, instanceType string) string {
			out, err := ec2c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String(name),
				LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(imageID), InstanceType: ec2types.InstanceType(instanceType)}})
			require.NoError(t, err)
			return aws.ToString(out.LaunchTemplate.LaunchTemplateId)
		},
		addVersion: func(t *testing.T, id, imageID string) int64 {
			out, err := ec2c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{LaunchTemplateId: aws.String(id),
				LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(imageID), InstanceType: "m6i.large"}})
			require.NoError(t, err)
			return aws.ToInt64(out.LaunchTemplateVersion.VersionNumber)
		},
		createGroup: func(t *testing.T, s groupSpec) {
			version := s.version
			if version == "" {
				version = "$Default"
			}
			spec := &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(s.templateID), Version: aws.String(version)}
			in := &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: aws.String(s.name),
				MinSize: aws.Int32(s.min), MaxSize: aws.Int32(s.max), DesiredCapacity: aws.Int32(s.desired),
				AvailabilityZones: []string{"us-east-1a", "us-east-1b", "us-east-1c"}}
			if s.mixed {
				in.MixedInstancesPolicy = &astypes.MixedInstancesPolicy{
					LaunchTemplate: &astypes.LaunchTemplate{LaunchTemplateSpecification: spec,
						Overrides: []astypes.LaunchTemplateOverrides{{InstanceType: aws.String("m6i.large")}, {InstanceType: aws.String("m5.large")}}},
					InstancesDistribution: &astypes.InstancesDistribution{OnDemandPercentageAboveBaseCapacity: aws.Int32(100)},
				}
			} else {
				in.LaunchTemplate = spec
			}
			for k, v := range s.tags {
				in.Tags = append(in.Tags, astypes.Tag{Key: aws.String(k), Value: aws.String(v), PropagateAtLaunch: aws.Bool(true),
					ResourceId: aws.String(s.name), ResourceType: aws.String("auto-scaling-group")})
			}
			_, err := asc.CreateAutoScalingGroup(ctx, in)
			require.NoError(t, err)
			if s.cluster != "" {
				_, err := ecsc.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(s.cluster)})
				require.NoError(t, err)
				clusterOf[s.name] = s.cluster
			}
			registerAgents(t, asc, ecsc, clusterOf, registered)
		},
		settle: func(t *testing.T) { registerAgents(t, asc, ecsc, clusterOf, registered) },
	}
}

// registerAgents plays the ECS container agent of every InService instance of the groups that serve a
// cluster: it registers the instance's container instance once (RegisterContainerInstance with an instance
// identity document naming the EC2 instance id, as the agent sends it).
func registerAgents(t *testing.T, asc *autoscaling.Client, ecsc *ecs.Client, clusterOf map[string]string, registered map[string]bool) {
	ctx := context.Background()
	for group, cluster := range clusterOf {
		out, err := asc.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
		require.NoError(t, err)
		for _, g := range out.AutoScalingGroups {
			for _, inst := range g.Instances {
				id := aws.ToString(inst.InstanceId)
				if registered[id] || inst.LifecycleState != astypes.LifecycleStateInService {
					continue
				}
				doc, _ := json.Marshal(map[string]string{"instanceId": id, "region": testenv.Region,
					"availabilityZone": aws.ToString(inst.AvailabilityZone)})
				_, err := ecsc.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String(cluster),
					InstanceIdentityDocument: aws.String(string(doc))})
				require.NoError(t, err)
				registered[id] = true
			}
		}
	}
}
