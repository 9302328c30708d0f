package providers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/state"
)

// versionDescriptionPrefix marks launch template versions the agent created, so a version created just
// before a crash is found and reused instead of created twice.
const versionDescriptionPrefix = "patch-agent: "

// ErrUnsupportedGroup is returned for groups whose launch configuration the agent cannot move safely.
var ErrUnsupportedGroup = errors.New("unsupported group configuration")

// TemplateRef returns how a group references its launch template. Groups on a launch configuration, and mixed
// instances policies whose overrides name other launch templates, are ErrUnsupportedGroup: the agent cannot
// move every instance type of them to the new AMI with one template version.
func TemplateRef(g astypes.AutoScalingGroup) (state.LaunchTemplateRef, error) {
	name := aws.ToString(g.AutoScalingGroupName)
	if lt := g.LaunchTemplate; lt != nil {
		return state.LaunchTemplateRef{ID: aws.ToString(lt.LaunchTemplateId), Name: aws.ToString(lt.LaunchTemplateName), Version: versionOrDefault(lt.Version)}, nil
	}
	if mip := g.MixedInstancesPolicy; mip != nil && mip.LaunchTemplate != nil && mip.LaunchTemplate.LaunchTemplateSpecification != nil {
		for _, o := range mip.LaunchTemplate.Overrides {
			if o.LaunchTemplateSpecification != nil {
				return state.LaunchTemplateRef{}, fmt.Errorf("group %s: mixed instances override for %s names its own launch template: %w",
					name, aws.ToString(o.InstanceType), ErrUnsupportedGroup)
			}
		}
		lt := mip.LaunchTemplate.LaunchTemplateSpecification
		return state.LaunchTemplateRef{ID: aws.ToString(lt.LaunchTemplateId), Name: aws.ToString(lt.LaunchTemplateName), Version: versionOrDefault(lt.Version), MixedInstances: true}, nil
	}
	if g.LaunchConfigurationName != nil {
		return state.LaunchTemplateRef{}, fmt.Errorf("group %s uses launch configuration %s; migrate it to a launch template: %w",
			name, aws.ToString(g.LaunchConfigurationName), ErrUnsupportedGroup)
	}
	return state.LaunchTemplateRef{}, fmt.Errorf("group %s has no launch template: %w", name, ErrUnsupportedGroup)
}

// usesInstanceRequirements reports whether g's mixed instances policy selects instance types by attributes
// (an override with InstanceRequirements).
func UsesInstanceRequirements(g astypes.AutoScalingGroup) bool {
	if mip := g.MixedInstancesPolicy; mip != nil && mip.LaunchTemplate != nil {
		for _, o := range mip.LaunchTemplate.Overrides {
			if o.InstanceRequirements != nil {
				return true
			}
		}
	}
	return false
}

// instanceRequirementsReason is why a group that selects instance types by attributes is not rolled by
// instance refresh. Auto Scaling refuses a refresh with a desired configuration on such a group, and the agent
// rolls only through one: it names the explicit launch template version, leaves the group's own reference as
// it is until the refresh succeeds, and keeps RollbackInstanceRefresh possible. Without one the agent would have
// to write the group's launch template version itself, and a rollback would be another write and another
// refresh, with no RollbackInstanceRefresh.
const InstanceRequirementsReason = "not rolled: the group selects instance types by attributes (InstanceRequirements), and Auto Scaling " +
	"refuses an instance refresh with a desired configuration on such a group; list the instance types in the mixed instances " +
	"policy instead (docs/deploy.md)"

// versionOrDefault applies Auto Scaling's default: a launch template specification without a version means
// $Default (Amazon EC2 Auto Scaling API Reference: LaunchTemplateSpecification, "Version ... the default is $Default").
func versionOrDefault(v *string) string {
	if aws.ToString(v) == "" {
		return "$Default"
	}
	return *v
}

// TemplateVersion is one launch template version as the agent needs it.
type TemplateVersion struct {
	Number      int64
	ImageID     string
	Description string
	// InstanceType is the version's instance type ("" when it names none: attribute-based selection).
	InstanceType string
	// CreatedBy is the principal that created the version, as DescribeLaunchTemplateVersions reports it ("" when
	// it does not).
	CreatedBy string
}

// Templates reads and writes launch template versions and points groups at them.
type Templates struct {
	EC2         awsapi.EC2
	AutoScaling awsapi.AutoScaling
}

// Resolve returns the version a reference resolves to right now: "$Default" and "$Latest" are resolved by
// EC2 exactly as Auto Scaling resolves them at launch (Amazon EC2 User Guide: "Modify a launch template
// (manage launch template versions)").
func (t Templates) Resolve(ctx context.Context, ref state.LaunchTemplateRef) (TemplateVersion, error) {
	in := &ec2.DescribeLaunchTemplateVersionsInput{Versions: []string{ref.Version}}
	if ref.ID != "" {
		in.LaunchTemplateId = aws.String(ref.ID)
	} else {
		in.LaunchTemplateName = aws.String(ref.Name)
	}
	out, err := t.EC2.DescribeLaunchTemplateVersions(ctx, in)
	if err != nil {
		return TemplateVersion{}, fmt.Errorf("resolving launch template %s version %s: %w", ref.ID+ref.Name, ref.Version, err)
	}
	if len(out.LaunchTemplateVersions) != 1 {
		return TemplateVersion{}, fmt.Errorf("resolving launch template %s version %s: got %d versions, want 1", ref.ID+ref.Name, ref.Version, len(out.LaunchTemplateVersions))
	}
	return versionOf(out.LaunchTemplateVersions[0]), nil
}

func versionOf(v ec2types.LaunchTemplateVersion) TemplateVersion {
	tv := TemplateVersion{Number: aws.ToInt64(v.VersionNumber), Description: aws.ToString(v.VersionDescription),
		CreatedBy: aws.ToString(v.CreatedBy)}
	if v.LaunchTemplateData != nil {
		tv.ImageID = aws.ToString(v.LaunchTemplateData.ImageId)
		tv.InstanceType = string(v.LaunchTemplateData.InstanceType)
	}
	return tv
}

// resolveWithLatest returns the version ref resolves to and the template's latest version, read with one
// DescribeLaunchTemplateVersions naming both (Versions [ref.Version, "$Latest"]; EC2 answers each version once,
// so one entry when they are the same): the latest is the entry with the highest VersionNumber, the resolved
// one the entry with ref's number, the one marked DefaultVersion for "$Default", the latest for "$Latest"
// (Amazon EC2 API Reference, DescribeLaunchTemplateVersions). An answer that does not tell them apart is
// read again one version at a time (Resolve). At a fleet's rollout start this saves one EC2 read per group
// on the non-mutating limit the creates wait behind.
func (t Templates) resolveWithLatest(ctx context.Context, ref state.LaunchTemplateRef) (cur, latest TemplateVersion, err error) {
	in := &ec2.DescribeLaunchTemplateVersionsInput{Versions: []string{ref.Version}}
	if ref.Version != "$Latest" {
		in.Versions = append(in.Versions, "$Latest")
	}
	if ref.ID != "" {
		in.LaunchTemplateId = aws.String(ref.ID)
	} else {
		in.LaunchTemplateName = aws.String(ref.Name)
	}
	out, err := t.EC2.DescribeLaunchTemplateVersions(ctx, in)
	if err != nil {
		return cur, latest, fmt.Errorf("resolving launch template %s versions %s and $Latest: %w", ref.ID+ref.Name, ref.Version, err)
	}
	var found, haveLatest bool
	for _, v := range out.LaunchTemplateVersions {
		tv := versionOf(v)
		if !haveLatest || tv.Number > latest.Number {
			latest, haveLatest = tv, true
		}
	}
	for _, v := range out.LaunchTemplateVersions {
		tv := versionOf(v)
		switch ref.Version {
		case "$Latest":
			found = haveLatest
			cur = latest
		case "$Default":
			if aws.ToBool(v.DefaultVersion) {
				cur, found = tv, true
			}
		default:
			if strconv.FormatInt(tv.Number, 10) == ref.Version {
				cur, found = tv, true
			}
		}
	}
	if found && haveLatest && len(out.LaunchTemplateVersions) <= 2 {
		return cur, latest, nil
	}
	if cur, err = t.Resolve(ctx, ref); err != nil {
		return cur, latest, err
	}
	latest, err = t.Resolve(ctx, state.LaunchTemplateRef{ID: ref.ID, Name: ref.Name, Version: "$Latest"})
	return cur, latest, err
}

// EnsureVersion returns a launch template version that is a copy of the version ref resolves to with ImageId
// set to imageID. When the resolved version already launches imageID it is returned as is; when the latest
// version is one the agent created for imageID (a crash after CreateLaunchTemplateVersion) it is reused;
// otherwise a new version is created from the resolved one (SourceVersion), so every other setting is kept.
// Creating a version does not change the template's default version (EC2 API Reference:
// CreateLaunchTemplateVersion).
func (t Templates) EnsureVersion(ctx context.Context, ref state.LaunchTemplateRef, imageID, why string) (TemplateVersion, error) {
	cur, latest, err := t.resolveWithLatest(ctx, ref)
	if err != nil {
		return TemplateVersion{}, err
	}
	if cur.ImageID == imageID {
		return cur, nil
	}
	if latest.ImageID == imageID && strings.HasPrefix(latest.Description, versionDescriptionPrefix) {
		return latest, nil
	}
	in := &ec2.CreateLaunchTemplateVersionInput{
		SourceVersion:      aws.String(strconv.FormatInt(cur.Number, 10)),
		VersionDescription: aws.String(Truncate(versionDescriptionPrefix+why, 255)),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(imageID)},
	}
	if ref.ID != "" {
		in.LaunchTemplateId = aws.String(ref.ID)
	} else {
		in.LaunchTemplateName = aws.String(ref.Name)
	}
	out, err := t.EC2.CreateLaunchTemplateVersion(ctx, in)
	if err != nil {
		return TemplateVersion{}, fmt.Errorf("creating launch template %s version with AMI %s: %w", ref.ID+ref.Name, imageID, err)
	}
	if out.LaunchTemplateVersion == nil {
		return TemplateVersion{}, fmt.Errorf("creating launch template %s version with AMI %s: empty response", ref.ID+ref.Name, imageID)
	}
	return versionOf(*out.LaunchTemplateVersion), nil
}
