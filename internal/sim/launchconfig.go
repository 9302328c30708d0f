package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// Launch configurations: the predecessor of launch templates that some groups still use.
//
// Amazon EC2 Auto Scaling User Guide, "Launch configurations": a launch configuration names one AMI and one
// instance type, cannot be modified (only replaced) and has no versions; Amazon EC2 Auto Scaling no longer
// adds features to them and recommends migrating every group to a launch template. A group on a launch
// configuration reports LaunchConfigurationName (and no LaunchTemplate), as does each of its instances.
//
// What the simulation keeps of it: each launch configuration is backed by a launch template that only the
// simulation sees (not listed by name, its id never reported), so that a group on a launch configuration
// launches, scales and terminates exactly as every other group. Pointing such a group at a launch template
// (UpdateAutoScalingGroup) migrates it.

// maxLaunchConfigurationNames is the DescribeLaunchConfigurations limit on LaunchConfigurationNames (Amazon EC2
// Auto Scaling API Reference, "DescribeLaunchConfigurations": "Array Members: Maximum number of 50 items").
const maxLaunchConfigurationNames = 50

// launchConfiguration is one launch configuration and the hidden launch template behind it.
type launchConfiguration struct {
	name, arn, imageID, instanceType string
	createdAt                        time.Time
	templateID                       string
}

// CreateLaunchConfiguration creates a launch configuration that launches imageID as instanceType. Setup helper:
// not counted. Errors: AlreadyExists, ValidationError (no name, no image, no instance type).
func (as *autoScalingService) CreateLaunchConfiguration(name, imageID, instanceType string) error {
	defer as.lock()()
	if name == "" || imageID == "" || instanceType == "" {
		return apiError("ValidationError", "A launch configuration needs a name, an image id and an instance type")
	}
	if as.launchConfigs[name] != nil {
		return apiError("AlreadyExists", "Launch Configuration by this name already exists - A launch configuration already exists with the name %s", name)
	}
	t := &launchTemplate{id: "lt-" + as.hex(17), name: "launch-configuration:" + name, createdAt: as.now(), defaultVersion: 1}
	t.versions = []*templateVersion{{number: 1, imageID: imageID, instanceType: instanceType, createdAt: as.now()}}
	as.ec2.addHiddenTemplate(t)
	lc := &launchConfiguration{
		name: name,
		arn: fmt.Sprintf("arn:aws:autoscaling:%s:%s:launchConfiguration:%s:launchConfigurationName/%s",
			as.opts.Region, as.opts.AccountID, as.uuid(), name),
		imageID: imageID, instanceType: instanceType, createdAt: as.now(), templateID: t.id,
	}
	as.launchConfigs[name] = lc
	as.lcOrder = append(as.lcOrder, name)
	return nil
}

// CreateGroupOnLaunchConfiguration creates a group (as CreateGroup) that launches from the named launch
// configuration; spec's launch template fields must be empty and MixedInstances false (a mixed instances
// policy needs a launch template). Setup helper: not counted. Errors: those of CreateGroup, ValidationError
// for a launch configuration that does not exist or a spec that also names a launch template.
func (as *autoScalingService) CreateGroupOnLaunchConfiguration(spec GroupSpec, lcName string) error {
	unlock := as.lock()
	lc := as.launchConfigs[lcName]
	unlock()
	switch {
	case lc == nil:
		return apiError("ValidationError", "Launch configuration name not found - Launch configuration %s not found", lcName)
	case spec.LaunchTemplateID != "" || spec.LaunchTemplateVersion != "" || spec.MixedInstances:
		return apiError("ValidationError", "Valid requests must contain either LaunchTemplate, LaunchConfigurationName, InstanceId or MixedInstancesPolicy parameter.")
	}
	spec.LaunchTemplateID = lc.templateID
	if err := as.CreateGroup(spec); err != nil {
		return err
	}
	defer as.lock()()
	as.lcGroups[spec.Name] = lc
	return nil
}

// describeLaunchConfigurationGroup rewrites the description of a group on a launch configuration: the group
// and each instance launched from it name the launch configuration instead of the hidden launch template.
// A group since pointed at a launch template is left as it is. Callers hold the lock.
func (as *autoScalingService) describeLaunchConfigurationGroup(g *group, out *astypes.AutoScalingGroup) {
	lc := as.lcGroups[g.name]
	if lc == nil || g.ltID != lc.templateID || g.mixed {
		return
	}
	out.LaunchTemplate, out.LaunchConfigurationName = nil, ptr(lc.name)
	for i := range out.Instances {
		if lt := out.Instances[i].LaunchTemplate; lt != nil && deref(lt.LaunchTemplateId) == lc.templateID {
			out.Instances[i].LaunchTemplate, out.Instances[i].LaunchConfigurationName = nil, ptr(lc.name)
		}
	}
}

// DescribeLaunchConfigurations describes launch configurations, all or those named in
// LaunchConfigurationNames (at most 50; names that do not exist are left out), in name order, paged by
// MaxRecords (default 50, at most 100) and NextToken.
// Amazon EC2 Auto Scaling API Reference, "DescribeLaunchConfigurations". Errors: ValidationError.
func (c *AutoScalingClient) DescribeLaunchConfigurations(ctx context.Context, in *autoscaling.DescribeLaunchConfigurationsInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeLaunchConfigurationsOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:DescribeLaunchConfigurations")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &autoscaling.DescribeLaunchConfigurationsInput{}
	}
	if len(in.LaunchConfigurationNames) > maxLaunchConfigurationNames {
		return nil, apiError("ValidationError", "1 validation error detected: Value at 'launchConfigurationNames' failed to satisfy constraint: Member must have length less than or equal to %d", maxLaunchConfigurationNames)
	}
	limit := int32(50)
	if in.MaxRecords != nil {
		if *in.MaxRecords < 1 || *in.MaxRecords > 100 {
			return nil, apiError("ValidationError", "1 validation error detected: Value '%d' at 'maxRecords' failed to satisfy constraint: Member must have value between 1 and 100", *in.MaxRecords)
		}
		limit = *in.MaxRecords
	}
	names := append([]string(nil), as.lcOrder...)
	sort.Strings(names)
	if len(in.LaunchConfigurationNames) > 0 {
		want := map[string]bool{}
		for _, n := range in.LaunchConfigurationNames {
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
		s, ok := cutPrefix(*in.NextToken, "lc-")
		if !ok {
			return nil, apiError("ValidationError", "The token '%s' is invalid.", *in.NextToken)
		}
		from = s
	}
	out := &autoscaling.DescribeLaunchConfigurationsOutput{LaunchConfigurations: []astypes.LaunchConfiguration{}}
	for _, n := range names {
		if n < from {
			continue
		}
		if int32(len(out.LaunchConfigurations)) == limit {
			out.NextToken = ptr("lc-" + n)
			break
		}
		lc := as.launchConfigs[n]
		out.LaunchConfigurations = append(out.LaunchConfigurations, astypes.LaunchConfiguration{
			LaunchConfigurationName: ptr(lc.name),
			LaunchConfigurationARN:  ptr(lc.arn),
			ImageId:                 ptr(lc.imageID),
			InstanceType:            ptr(lc.instanceType),
			CreatedTime:             ptr(lc.createdAt),
			InstanceMonitoring:      &astypes.InstanceMonitoring{Enabled: ptr(true)},
			EbsOptimized:            ptr(false),
			SecurityGroups:          []string{},
		})
	}
	return out, nil
}
