// Package fleet builds simulated accounts (internal/sim) for the tests and the demo of `patch-agent audit`: six
// monthly releases of the public ECS- and EKS-optimized AMI parameters with their AMIs registered, and one
// builder per kind of Auto Scaling group the audit tells apart.
package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// Start is when a fleet's clock starts (the demo's start: 2026-11-30T02:00Z).
var Start = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// Releases is how many releases each line has; the latest is the recommended AMI.
const Releases = 6

// ReleaseDates are when each release's parameter version was published (release n at ReleaseDates[n-1]); its AMI
// was created two days before.
var ReleaseDates = []time.Time{
	time.Date(2026, 6, 10, 17, 0, 0, 0, time.UTC),
	time.Date(2026, 7, 8, 17, 0, 0, 0, time.UTC),
	time.Date(2026, 8, 12, 17, 0, 0, 0, time.UTC),
	time.Date(2026, 9, 9, 17, 0, 0, 0, time.UTC),
	time.Date(2026, 10, 14, 17, 0, 0, 0, time.UTC),
	time.Date(2026, 11, 18, 17, 0, 0, 0, time.UTC),
}

// EKSCluster is the fleet's EKS cluster, at EKSVersion.
const (
	EKSCluster = "platform"
	EKSVersion = "1.31"
)

// Line is one public AMI line: its parameters and the AMI of each release.
type Line struct {
	// Parameter is the recommended parameter the audit reads; ImageIDParameter, when set, is its plain
	// image_id sub-parameter that launch templates resolve (resolve:ssm:).
	Parameter, ImageIDParameter string
	// JSON makes Parameter's value the "recommended" JSON document (ECS), instead of a plain AMI id (EKS).
	JSON bool
	Arch string
	// prefix makes the line's AMI ids distinct: ami-0<prefix><release, 12 digits>.
	prefix, name string
}

// The lines of a fleet.
var (
	ECSx86 = Line{Parameter: audit.ECSParameterX86_64, ImageIDParameter: audit.ECSParameterX86_64 + "/image_id", JSON: true,
		Arch: "x86_64", prefix: "ec86", name: "al2023-ami-ecs-hvm-2023.0.%s-kernel-6.1-x86_64"}
	ECSarm64 = Line{Parameter: audit.ECSParameterARM64, ImageIDParameter: audit.ECSParameterARM64 + "/image_id", JSON: true,
		Arch: "arm64", prefix: "eca6", name: "al2023-ami-ecs-hvm-2023.0.%s-kernel-6.1-arm64"}
	EKSx86 = Line{Parameter: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id",
		Arch: "x86_64", prefix: "e586", name: "amazon-eks-node-al2023-x86_64-standard-1.31-v%s"}
	EKSarm64 = Line{Parameter: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id",
		Arch: "arm64", prefix: "e5a6", name: "amazon-eks-node-al2023-arm64-standard-1.31-v%s"}
)

// Lines lists every line of a fleet.
func Lines() []Line { return []Line{ECSx86, ECSarm64, EKSx86, EKSarm64} }

// Image returns the AMI id of release n (1 to Releases).
func (l Line) Image(n int) string { return fmt.Sprintf("ami-0%s%012d", l.prefix, n) }

// Created returns the creation date of release n's AMI.
func Created(n int) time.Time { return ReleaseDates[n-1].Add(-48 * time.Hour) }

// ReleaseVersion returns the EKS release version of release n ("1.31.7-20260608").
func ReleaseVersion(n int) string { return "1.31.7-" + Created(n).Format("20060102") }

// Legacy is an ECS-optimized x86_64 AMI older than any release the parameters still hold (created
// 2025-09-20): what a forgotten launch configuration runs.
const Legacy = "ami-0ec8600000000000a"

// LegacyCreated is Legacy's creation date.
var LegacyCreated = time.Date(2025, 9, 20, 12, 0, 0, 0, time.UTC)

// New returns an account (region us-east-1) whose clock is at Start, holding every line's releases (parameter
// versions and registered AMIs), Legacy, and EKS cluster EKSCluster at EKSVersion.
func New() *sim.Account { return NewAt(Start) }

// NewAt returns the account New returns with its clock at at (not after Start): a fleet that is built
// by running the simulation up to Start.
func NewAt(at time.Time) *sim.Account {
	a := sim.New(testingclock.NewFakeClock(at), sim.Options{})
	for _, l := range Lines() {
		for n := 1; n <= Releases; n++ {
			id, name := l.Image(n), fmt.Sprintf(l.name, Created(n).Format("20060102"))
			a.RegisterImage(sim.ImageSpec{ID: id, Name: name, Architecture: l.Arch, Created: Created(n)})
			value := id
			if l.JSON {
				value = fmt.Sprintf(`{"ecs_agent_version":"1.9%d.0","ecs_runtime_version":"Docker version 25.0.8","image_id":%q,"image_name":%q,"image_version":"2023.0.%s","os":"Amazon Linux 2023","schema_version":1}`,
					n, id, name, Created(n).Format("20060102"))
			}
			a.PutParameterAt(l.Parameter, value, ReleaseDates[n-1])
			if l.ImageIDParameter != "" {
				a.PutParameterAt(l.ImageIDParameter, id, ReleaseDates[n-1])
			}
		}
	}
	a.RegisterImage(sim.ImageSpec{ID: Legacy, Name: "al2023-ami-ecs-hvm-2023.0.20250918-kernel-6.1-x86_64", Created: LegacyCreated})
	a.CreateEKSCluster(EKSCluster, EKSVersion)
	return a
}

// Clients returns the audit's clients on the account.
func Clients(a *sim.Account) audit.Clients {
	return audit.Clients{AutoScaling: a.ReadOnlyAutoScaling(), EC2: a.ReadOnlyEC2(), ECS: a.ReadOnlyECS(), EKS: a.ReadOnlyEKS(),
		SSM: a.ReadOnlySSM()}
}

// Auditor returns an auditor of the account, dated by its clock.
func Auditor(a *sim.Account) *audit.Auditor {
	return &audit.Auditor{Clients: Clients(a), Region: a.Options().Region, Clock: a.Clock()}
}

// Group is one Auto Scaling group to add to a fleet.
type Group struct {
	Name, Cluster, InstanceType string
	// Image is the AMI the instances run.
	Image     string
	Instances int32
}

func (g Group) spec(lt string, tags map[string]string) sim.GroupSpec {
	return sim.GroupSpec{Name: g.Name, Min: g.Instances, Max: g.Instances + 2, Desired: g.Instances, LaunchTemplateID: lt, Tags: tags}
}

// AddHardCodedECS adds a group of ECS cluster g.Cluster, named by the cluster's capacity provider (no tags),
// whose launch template hard-codes g.Image.
func AddHardCodedECS(a *sim.Account, g Group) error {
	lt := a.CreateLaunchTemplate(g.Name+"-lt", g.Image, g.InstanceType)
	s := g.spec(lt, map[string]string{"team": "orders"})
	s.ECSCluster, s.CapacityProvider = g.Cluster, &sim.CapacityProviderSpec{Name: g.Name + "-cp"}
	return a.CreateGroup(s)
}

// AddResolveSSMECS adds a group of ECS cluster g.Cluster (tags patch-agent/platform and patch-agent/cluster,
// not opted in) whose instances launched on g.Image, after which its launch template's default version became
// "resolve:ssm:<param>": new instances get the AMI param names, running ones keep theirs.
func AddResolveSSMECS(a *sim.Account, g Group, param string) error {
	lt := a.CreateLaunchTemplate(g.Name+"-lt", g.Image, g.InstanceType)
	s := g.spec(lt, map[string]string{model.TagPlatform: model.PlatformECS, model.TagCluster: g.Cluster})
	s.ECSCluster = g.Cluster
	if err := a.CreateGroup(s); err != nil {
		return err
	}
	a.SetDefaultLaunchTemplateVersion(lt, a.CreateLaunchTemplateVersion(lt, "resolve:ssm:"+param))
	return nil
}

// AddPatchAgentECS adds a group of ECS cluster g.Cluster opted in to patch-agent with AMI parameter param, with
// the agent's launching and terminating lifecycle hooks (docs/deploy.md, "4. Add the lifecycle hooks").
func AddPatchAgentECS(a *sim.Account, g Group, param string) error {
	s := patchAgentECSSpec(a, g, param)
	s.Hooks = []sim.HookSpec{
		{Name: "patch-agent-launch", Transition: sim.TransitionLaunching, HeartbeatTimeout: 300 * time.Second, DefaultResult: sim.ResultAbandon},
		{Name: "patch-agent-drain", Transition: sim.TransitionTerminating, HeartbeatTimeout: 300 * time.Second, DefaultResult: sim.ResultContinue},
	}
	return a.CreateGroup(s)
}

// CompleteLifecycleActions completes every lifecycle action of group waiting now with CONTINUE, as the agent
// does once a launch serves or a drain is done: a fleet without an agent uses it to move its groups.
func CompleteLifecycleActions(ctx context.Context, a *sim.Account, group string) error {
	var waiting []sim.LifecycleAction
	a.Observe(func(v *sim.View) {
		for _, act := range v.LifecycleActions() {
			if act.Group == group && act.Active {
				waiting = append(waiting, act)
			}
		}
	})
	for _, act := range waiting {
		if _, err := a.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String(group),
			LifecycleHookName: aws.String(act.Hook), LifecycleActionToken: aws.String(act.Token), LifecycleActionResult: aws.String(sim.ResultContinue)}); err != nil {
			return err
		}
	}
	return nil
}

// AddPatchAgentECSWithoutHooks is AddPatchAgentECS without the lifecycle hooks: an opted-in group the agent
// cannot roll by instance refresh.
func AddPatchAgentECSWithoutHooks(a *sim.Account, g Group, param string) error {
	return a.CreateGroup(patchAgentECSSpec(a, g, param))
}

func patchAgentECSSpec(a *sim.Account, g Group, param string) sim.GroupSpec {
	lt := a.CreateLaunchTemplate(g.Name+"-lt", g.Image, g.InstanceType)
	s := g.spec(lt, map[string]string{model.TagEnabled: "true", model.TagPlatform: model.PlatformECS,
		model.TagCluster: g.Cluster, model.TagParameter: param})
	s.ECSCluster = g.Cluster
	return s
}

// AddLaunchConfigurationECS adds a group of ECS cluster g.Cluster (tags patch-agent/platform and
// patch-agent/cluster) on launch configuration <name>-lc.
func AddLaunchConfigurationECS(a *sim.Account, g Group) error {
	if err := a.CreateLaunchConfiguration(g.Name+"-lc", g.Image, g.InstanceType); err != nil {
		return err
	}
	s := g.spec("", map[string]string{model.TagPlatform: model.PlatformECS, model.TagCluster: g.Cluster})
	s.LaunchTemplateID, s.ECSCluster = "", g.Cluster
	return a.CreateGroupOnLaunchConfiguration(s, g.Name+"-lc")
}

// AddManagedNodegroup adds EKS managed node group g.Name of EKSCluster, AMI type amiType, on release n of
// its line (g.Image is ignored), and returns the name of the Auto Scaling group EKS runs it on.
func AddManagedNodegroup(a *sim.Account, g Group, amiType string, line Line, n int) (string, error) {
	return a.CreateEKSNodegroup(sim.EKSNodegroupSpec{Cluster: EKSCluster, Name: g.Name, AMIType: amiType,
		ReleaseVersion: ReleaseVersion(n), ImageID: line.Image(n), InstanceType: g.InstanceType,
		Min: g.Instances, Max: g.Instances + 2, Desired: g.Instances})
}

// AddSelfManagedEKS adds a self-managed node group of EKSCluster (tag kubernetes.io/cluster/<cluster>=owned)
// whose launch template hard-codes g.Image.
func AddSelfManagedEKS(a *sim.Account, g Group) error {
	lt := a.CreateLaunchTemplate(g.Name+"-lt", g.Image, g.InstanceType)
	return a.CreateGroup(g.spec(lt, map[string]string{"kubernetes.io/cluster/" + EKSCluster: "owned", "Name": g.Name}))
}

// AddUntagged adds a group nothing tells the platform of (no cluster, no tags).
func AddUntagged(a *sim.Account, g Group) error {
	lt := a.CreateLaunchTemplate(g.Name+"-lt", g.Image, g.InstanceType)
	return a.CreateGroup(g.spec(lt, map[string]string{"Name": g.Name}))
}
