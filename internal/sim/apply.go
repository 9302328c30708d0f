package sim

import (
	"strconv"
)

// ApplyLaunchTemplate plays an infrastructure-as-code apply (terraform apply, a CloudFormation stack update) on
// group: a new version of the group's launch template, a copy of its latest version with imageID as its AMI and
// createdBy as the principal DescribeLaunchTemplateVersions reports ("" = none), and the group pointed at that
// version by number, as an aws_autoscaling_group with version = aws_launch_template.x.latest_version or
// !GetAtt LaunchTemplate.LatestVersionNumber does. The group's form of reference (LaunchTemplate or mixed
// instances policy) is kept. Running instances keep their AMI. Test helper: not counted as API calls. It
// returns the new version's number and panics when the group or its template does not exist.
func (as *autoScalingService) ApplyLaunchTemplate(group, imageID, createdBy string) (version int64) {
	defer as.lock()()
	g := as.groups[group]
	if g == nil {
		panic("sim: no group " + group)
	}
	t := as.ec2.template(g.ltID)
	if t == nil {
		panic("sim: group " + group + " has no launch template")
	}
	src := t.versions[len(t.versions)-1]
	v := &templateVersion{number: t.latest() + 1, imageID: imageID, instanceType: src.instanceType, createdAt: as.now(), createdBy: createdBy}
	t.versions = append(t.versions, v)
	g.ltVersion = strconv.FormatInt(v.number, 10)
	return v.number
}

// PointGroupAtVersion plays an apply that points group at version (a number, "$Default" or "$Latest") of its
// launch template without creating one, as reverting the version in the infrastructure code does. Test helper:
// not counted. It panics when the group or the version does not exist.
func (as *autoScalingService) PointGroupAtVersion(group, version string) {
	defer as.lock()()
	g := as.groups[group]
	if g == nil {
		panic("sim: no group " + group)
	}
	if _, err := as.validateTemplateRef(g.ltID, version); err != nil {
		panic("sim: " + err.Error())
	}
	g.ltVersion = version
}
