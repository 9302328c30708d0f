// Package audit reports, for every Auto Scaling group of an account and region and without changing anything,
// how the group chooses its AMI (a hard-coded id in its launch template, "resolve:ssm:<parameter>", patch-agent,
// a launch configuration, or EKS for a managed node group), which AMIs its instances run, the AMI recommended
// for its platform and architecture, and how far behind it is: in days between the AMIs' creation dates and in
// releases of the recommended parameter. It is `patch-agent audit` (docs/audit.md).
package audit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// API limits the audit splits its requests to.
const (
	// maxGroupsPerPage: DescribeAutoScalingGroups MaxRecords "The maximum value is 100" (Amazon EC2 Auto
	// Scaling API Reference).
	maxGroupsPerPage = 100
	// maxLaunchConfigurationNames: DescribeLaunchConfigurations LaunchConfigurationNames, "Maximum number of 50
	// items" (Amazon EC2 Auto Scaling API Reference).
	maxLaunchConfigurationNames = 50
	// maxFilterValues is how many instance or image ids go in one DescribeInstances or DescribeImages filter
	// (the cluster-autoscaler convention of 100 ids a call keeps each request small).
	maxFilterValues = 100
	// maxInstancesPerPage: DescribeInstances MaxResults, 5 to 1000 (Amazon EC2 API Reference).
	maxInstancesPerPage = 1000
)

// Clients are the read-only AWS APIs of an audit.
type Clients struct {
	AutoScaling awsapi.ReadOnlyAutoScaling
	EC2         awsapi.ReadOnlyEC2
	ECS         awsapi.ReadOnlyECS
	EKS         awsapi.ReadOnlyEKS
	SSM         awsapi.ReadOnlySSM
}

// Auditor audits the Auto Scaling groups of one account and region.
type Auditor struct {
	Clients
	// Region is written in the report.
	Region string
	// Clock dates the report. Default: the real clock.
	Clock clock.PassiveClock
}

// subject is one group under audit with what the audit learned of it so far.
type subject struct {
	g    astypes.AutoScalingGroup
	tags map[string]string
	out  *Group
	// instanceIDs are the group's instances as DescribeAutoScalingGroups lists them.
	instanceIDs []string
	// eksFamily is the AMI family of the group's EKS managed node group AMI type ("" when none).
	eksFamily string
}

// Run audits every Auto Scaling group. Failing to list the groups or their instances is an error; any other
// read that fails (ECS, EKS, SSM, DescribeImages, a launch template) becomes a warning or a group note, and
// what it would have told is reported unknown.
func (a *Auditor) Run(ctx context.Context) (*Report, error) {
	clk := a.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &Report{Region: a.Region, GeneratedAt: clk.Now().UTC(), Groups: []Group{}}
	groups, err := a.listGroups(ctx)
	if err != nil {
		return nil, err
	}
	subjects := make([]*subject, 0, len(groups))
	for _, g := range groups {
		s := &subject{g: g, tags: groupTags(g), out: &Group{Name: aws.ToString(g.AutoScalingGroupName), InUse: []AMIUse{}}}
		for _, i := range g.Instances {
			s.instanceIDs = append(s.instanceIDs, aws.ToString(i.InstanceId))
		}
		subjects = append(subjects, s)
	}
	w := &run{Auditor: a, report: r, arch: &eks.Architectures{API: a.EC2}, clusters: &eks.Clusters{API: a.EKS, Clock: clk}}
	owners := w.owners(ctx)
	for _, s := range subjects {
		w.platform(s, owners)
	}
	if err := w.launchSources(ctx, subjects); err != nil {
		return nil, err
	}
	if err := w.instanceAMIs(ctx, subjects); err != nil {
		return nil, err
	}
	w.prefetchArchitectures(ctx, subjects)
	w.describeImages(ctx, subjects) // the names of the AMIs in use tell an ECS group's family
	for _, s := range subjects {
		w.architecture(ctx, s)
		w.recommendedParameter(ctx, s)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w.resolveParameters(ctx, subjects)
	w.describeImages(ctx, subjects)
	for _, s := range subjects {
		w.judge(ctx, s)
		r.Groups = append(r.Groups, *s.out)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sort.Slice(r.Groups, func(i, j int) bool { return r.Groups[i].Name < r.Groups[j].Name })
	r.Summary = summarize(r.Groups)
	return r, nil
}

// run is the state of one audit.
type run struct {
	*Auditor
	report   *Report
	arch     *eks.Architectures
	clusters *eks.Clusters
	// templates caches resolved launch template references; images the AMIs DescribeImages described;
	// params the parameters resolved; history the parameter histories read.
	templates map[string]templateRead
	images    map[string]imageInfo
	params    map[string]model.ResolvedAMI
	history   map[string]historyRead
}

func (w *run) warnf(format string, args ...any) {
	w.report.Warnings = append(w.report.Warnings, fmt.Sprintf(format, args...))
}

// listGroups lists every Auto Scaling group, 100 per call.
func (a *Auditor) listGroups(ctx context.Context) ([]astypes.AutoScalingGroup, error) {
	var out []astypes.AutoScalingGroup
	p := autoscaling.NewDescribeAutoScalingGroupsPaginator(a.AutoScaling, &autoscaling.DescribeAutoScalingGroupsInput{
		MaxRecords: aws.Int32(maxGroupsPerPage)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing Auto Scaling groups: %w", err)
		}
		out = append(out, page.AutoScalingGroups...)
	}
	return out, nil
}

// platform sets the platform and cluster of a group: its EKS managed node group, its ECS capacity provider,
// then its tags (patch-agent/platform and patch-agent/cluster, eks:cluster-name, kubernetes.io/cluster/<name>).
func (w *run) platform(s *subject, o owners) {
	g := s.out
	if ng, ok := o.nodegroups[g.Name]; ok {
		g.Platform, g.Cluster, g.ClusterFrom = PlatformEKS, ng.cluster, FromEKSNodegroup
		g.Nodegroup, g.AMIType, g.ReleaseVersion = ng.name, ng.amiType, ng.releaseVersion
		s.eksFamily = familyOfAMIType(ng.amiType)
		return
	}
	if cluster, ok := o.capacityProviders[g.Name]; ok {
		g.Platform, g.Cluster, g.ClusterFrom = PlatformECS, cluster, FromECSCapacityProvider
		return
	}
	if cluster := s.tags[model.TagCluster]; cluster != "" {
		platform := strings.ToLower(s.tags[model.TagPlatform])
		if platform != PlatformEKS {
			platform = PlatformECS
		}
		g.Platform, g.Cluster, g.ClusterFrom = platform, cluster, FromPatchAgentTag
		return
	}
	if cluster := s.tags["eks:cluster-name"]; cluster != "" {
		g.Platform, g.Cluster, g.ClusterFrom = PlatformEKS, cluster, FromEKSClusterNameTag
		return
	}
	for _, k := range sortedKeys(s.tags) {
		if cluster, ok := strings.CutPrefix(k, "kubernetes.io/cluster/"); ok && cluster != "" {
			g.Platform, g.Cluster, g.ClusterFrom = PlatformEKS, cluster, FromKubernetesTag+cluster
			return
		}
	}
	g.Platform = PlatformUnknown
}

// familyOfAMIType maps an EKS managed node group's AMI type to the AMI family of its public parameter ("" for
// CUSTOM and types without one).
func familyOfAMIType(t string) string {
	switch {
	case strings.HasPrefix(t, "AL2023_") && strings.HasSuffix(t, "_STANDARD"):
		return eks.FamilyAL2023
	case strings.HasPrefix(t, "AL2023_") && strings.HasSuffix(t, "_NVIDIA"):
		return eks.FamilyAL2023NVIDIA
	case strings.HasPrefix(t, "AL2023_") && strings.HasSuffix(t, "_NEURON"):
		return eks.FamilyAL2023Neuron
	case t == "AL2_x86_64_GPU":
		return eks.FamilyAL2GPU
	case t == "AL2_x86_64" || t == "AL2_ARM_64":
		return eks.FamilyAL2
	case strings.HasPrefix(t, "BOTTLEROCKET_") && strings.HasSuffix(t, "_NVIDIA"):
		return eks.FamilyBottlerocketNVIDIA
	case t == "BOTTLEROCKET_x86_64" || t == "BOTTLEROCKET_ARM_64":
		return eks.FamilyBottlerocket
	case strings.HasPrefix(t, "WINDOWS_"):
		// WINDOWS_CORE_2022_x86_64 -> windows-core-2022
		parts := strings.Split(strings.ToLower(t), "_")
		if len(parts) >= 3 {
			family := parts[0] + "-" + parts[1] + "-" + parts[2]
			for _, f := range eks.Families() {
				if f == family {
					return f
				}
			}
		}
	}
	return ""
}

// templateRead is one resolved launch template reference.
type templateRead struct {
	version      providers.TemplateVersion
	instanceType string
	err          error
}

// launchSources reads how each group chooses its AMI: its launch configuration, or the launch template
// version its reference resolves to now (one DescribeLaunchTemplateVersions per distinct reference).
func (w *run) launchSources(ctx context.Context, subjects []*subject) error {
	lcs, err := w.launchConfigurations(ctx, subjects)
	if err != nil {
		w.warnf("%v", err)
	}
	reader := &templateReader{api: w.EC2, versions: map[string]ec2types.LaunchTemplateVersion{}}
	templates := providers.Templates{EC2: reader}
	w.templates = map[string]templateRead{}
	for _, s := range subjects {
		if err := ctx.Err(); err != nil {
			return err
		}
		g := s.out
		if name := aws.ToString(s.g.LaunchConfigurationName); name != "" {
			g.AMISource, g.LaunchConfiguration = SourceLaunchConfiguration, name
			if lc, ok := lcs[name]; ok {
				g.ConfiguredImage = aws.ToString(lc.ImageId)
				s.addInstanceType(aws.ToString(lc.InstanceType))
			}
			g.Notes = append(g.Notes, fmt.Sprintf("launch configuration %s: migrate the group to a launch template (Auto Scaling adds no features to launch configurations, and patch-agent manages only groups on launch templates)", name))
			continue
		}
		ref, err := providers.TemplateRef(s.g)
		if err != nil && errors.Is(err, providers.ErrUnsupportedGroup) {
			// Mixed instances overrides with launch templates of their own: read the base template.
			if mip := s.g.MixedInstancesPolicy; mip != nil && mip.LaunchTemplate != nil && mip.LaunchTemplate.LaunchTemplateSpecification != nil {
				lt := mip.LaunchTemplate.LaunchTemplateSpecification
				ref = state.LaunchTemplateRef{ID: aws.ToString(lt.LaunchTemplateId), Name: aws.ToString(lt.LaunchTemplateName), Version: aws.ToString(lt.Version), MixedInstances: true}
				if ref.Version == "" {
					ref.Version = "$Default"
				}
				g.Notes = append(g.Notes, "mixed instances overrides name launch templates of their own: only the base launch template is read")
				err = nil
			}
		}
		if err != nil {
			g.AMISource = SourceUnknown
			g.Notes = append(g.Notes, err.Error())
			continue
		}
		if mip := s.g.MixedInstancesPolicy; mip != nil && mip.LaunchTemplate != nil {
			for _, o := range mip.LaunchTemplate.Overrides {
				s.addInstanceType(aws.ToString(o.InstanceType))
			}
		}
		key := ref.ID + "|" + ref.Name + "|" + ref.Version
		tr, ok := w.templates[key]
		if !ok {
			tr.version, tr.err = templates.Resolve(ctx, ref)
			if tr.err == nil {
				tr.instanceType = reader.instanceType(tr.version.Number, ref)
			}
			w.templates[key] = tr
		}
		label := ref.ID
		if label == "" {
			label = ref.Name
		}
		if tr.err != nil {
			g.AMISource, g.LaunchTemplate = SourceUnknown, label+":"+ref.Version
			g.Notes = append(g.Notes, tr.err.Error())
			continue
		}
		g.LaunchTemplate = fmt.Sprintf("%s:%s=%d", label, ref.Version, tr.version.Number)
		g.ConfiguredImage = tr.version.ImageID
		s.addInstanceType(tr.instanceType)
		optedIn, optInErr := model.OptedIn(s.tags)
		if optInErr != nil {
			g.Notes = append(g.Notes, optInErr.Error())
		}
		switch {
		case g.Nodegroup != "" && g.AMIType != "CUSTOM":
			g.AMISource = SourceEKSManaged
			g.Notes = append(g.Notes, fmt.Sprintf("EKS managed node group %s (AMI type %s, release %s): EKS chooses its AMI; move it with UpdateNodegroupVersion", g.Nodegroup, g.AMIType, g.ReleaseVersion))
		case optedIn:
			g.AMISource = SourcePatchAgent
			if _, err := model.TargetFromTags(g.Name, s.tags); err != nil {
				g.Notes = append(g.Notes, err.Error())
			}
			if note := w.hookNote(ctx, g.Name, s.tags); note != "" {
				g.Notes = append(g.Notes, note)
			}
		case strings.HasPrefix(g.ConfiguredImage, resolveSSMPrefix):
			g.AMISource = SourceSSMResolve
		default:
			g.AMISource = SourceHardCoded
			g.Notes = append(g.Notes, fmt.Sprintf("launch template %s version %d hard-codes %s: reference an AMI parameter (resolve:ssm:<parameter>) or opt the group in to patch-agent",
				label, tr.version.Number, g.ConfiguredImage))
		}
	}
	return nil
}

// hookNote says why an opted-in group that rolls by instance refresh (every group but those a deprecated
// patch-agent/strategy tag keeps on an older strategy) will not be rolled for want of the agent's lifecycle
// hooks, with the command that adds each one; "" when it has them (or rolls by an older strategy). A failed
// read is the note.
func (w *run) hookNote(ctx context.Context, group string, tags map[string]string) string {
	if st, err := model.ChooseStrategy(tags[model.TagStrategy], model.GroupTraits{}); err != nil || st != model.StrategyRefresh {
		return ""
	}
	hooks, err := providers.DescribeGroupHooks(ctx, w.AutoScaling, group)
	if err != nil {
		return err.Error()
	}
	_, _, missing := model.RefreshHooks(group, hooks, model.HookOwnership{Listed: model.ParseLifecycleHooksTag(tags)})
	if missing == "" {
		return ""
	}
	return "not rolled until fixed: " + missing
}

func (s *subject) addInstanceType(t string) {
	if t == "" {
		return
	}
	for _, have := range s.out.InstanceTypes {
		if have == t {
			return
		}
	}
	s.out.InstanceTypes = append(s.out.InstanceTypes, t)
	sort.Strings(s.out.InstanceTypes)
}

// launchConfigurations describes the launch configurations the groups use, 50 names per call.
func (w *run) launchConfigurations(ctx context.Context, subjects []*subject) (map[string]astypes.LaunchConfiguration, error) {
	var names []string
	seen := map[string]bool{}
	for _, s := range subjects {
		if n := aws.ToString(s.g.LaunchConfigurationName); n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := map[string]astypes.LaunchConfiguration{}
	for start := 0; start < len(names); start += maxLaunchConfigurationNames {
		batch := names[start:min(start+maxLaunchConfigurationNames, len(names))]
		p := autoscaling.NewDescribeLaunchConfigurationsPaginator(w.AutoScaling, &autoscaling.DescribeLaunchConfigurationsInput{LaunchConfigurationNames: batch})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return out, fmt.Errorf("describing launch configurations %s: %w", strings.Join(batch, ", "), err)
			}
			for _, lc := range page.LaunchConfigurations {
				out[aws.ToString(lc.LaunchConfigurationName)] = lc
			}
		}
	}
	return out, nil
}

// instanceAMIs reads the AMI and instance type of every instance of every group with DescribeInstances,
// 100 instance ids per call, and fills each group's InUse and InstanceTypes. An instance EC2 no longer
// reports (terminated since) is left out.
func (w *run) instanceAMIs(ctx context.Context, subjects []*subject) error {
	var ids []string
	for _, s := range subjects {
		ids = append(ids, s.instanceIDs...)
	}
	type found struct{ image, instanceType string }
	byID := map[string]found{}
	for start := 0; start < len(ids); start += maxFilterValues {
		batch := ids[start:min(start+maxFilterValues, len(ids))]
		p := ec2.NewDescribeInstancesPaginator(w.EC2, &ec2.DescribeInstancesInput{
			Filters:    []ec2types.Filter{{Name: aws.String("instance-id"), Values: batch}},
			MaxResults: aws.Int32(maxInstancesPerPage),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return fmt.Errorf("describing instances %s ...: %w", batch[0], err)
			}
			for _, res := range page.Reservations {
				for _, i := range res.Instances {
					byID[aws.ToString(i.InstanceId)] = found{aws.ToString(i.ImageId), string(i.InstanceType)}
				}
			}
		}
	}
	for _, s := range subjects {
		count := map[string]int{}
		for _, id := range s.instanceIDs {
			f, ok := byID[id]
			if !ok {
				continue
			}
			s.out.Instances++
			count[f.image]++
			s.addInstanceType(f.instanceType)
		}
		for _, img := range sortedKeys(count) {
			s.out.InUse = append(s.out.InUse, AMIUse{ImageID: img, Instances: count[img]})
		}
	}
	return nil
}

// prefetchArchitectures describes every instance type of every group at once (one DescribeInstanceTypes per
// 100 types) so that each group's architecture is then answered from the cache. Its answer, and its error (a
// mix of architectures, a type EC2 does not know), are not needed here: each group meets its own in
// architecture.
func (w *run) prefetchArchitectures(ctx context.Context, subjects []*subject) {
	var types []string
	for _, s := range subjects {
		types = append(types, s.out.InstanceTypes...)
	}
	if len(types) > 0 {
		_, _ = w.arch.For(ctx, types)
	}
}

// architecture tells the AMI architecture of a group: tag patch-agent/architecture, else that of its instance
// types (EC2 DescribeInstanceTypes).
func (w *run) architecture(ctx context.Context, s *subject) {
	g := s.out
	if arch := strings.TrimSpace(s.tags[providers.TagArchitecture]); arch != "" {
		g.Architecture = arch
		return
	}
	if len(g.InstanceTypes) == 0 {
		return
	}
	arch, err := w.arch.For(ctx, g.InstanceTypes)
	if err != nil {
		g.Notes = append(g.Notes, "architecture: "+err.Error())
		return
	}
	g.Architecture = arch
}

// groupTags returns a group's tags by key.
func groupTags(g astypes.AutoScalingGroup) map[string]string {
	m := make(map[string]string, len(g.Tags))
	for _, t := range g.Tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// dayOf formats a time as its UTC date.
func dayOf(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.DateOnly)
}
