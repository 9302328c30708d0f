package sim

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// ec2Service is Amazon EC2: launch templates and their versions, instances (Auto Scaling's among them),
// registered AMIs (images.go) and the images whose instances never become healthy (MarkImageUnhealthy).
type ec2Service struct {
	*world

	templates       map[string]*launchTemplate
	templateOrder   []string
	instances       map[string]*instance
	instanceOrder   []string
	unhealthyImages map[string]bool
	images          map[string]*image // by image id (images.go)
	imageOrder      []string
}

// launchTemplate is an EC2 launch template with its numbered versions.
type launchTemplate struct {
	id, name       string
	createdAt      time.Time
	defaultVersion int64
	versions       []*templateVersion // versions[i].number == i+1
}

type templateVersion struct {
	number       int64
	imageID      string
	instanceType string
	description  string
	createdAt    time.Time
	createdBy    string // the principal DescribeLaunchTemplateVersions reports as CreatedBy ("" = not reported)
}

func (t *launchTemplate) latest() int64 { return int64(len(t.versions)) }

// resolve returns the version a version reference names.
// Amazon EC2 User Guide, "Modify a launch template (manage launch template versions)": a launch template has one
// default version; $Latest is the highest-numbered version and $Default the version marked default, which stays
// the same when new versions are created. Amazon EC2 Auto Scaling API Reference, "LaunchTemplateSpecification":
// Version is a number, $Latest or $Default, and an omitted version means $Default.
func (t *launchTemplate) resolve(ref string) (*templateVersion, bool) {
	switch ref {
	case "", "$Default":
		return t.versions[t.defaultVersion-1], true
	case "$Latest":
		return t.versions[len(t.versions)-1], true
	}
	n, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || n < 1 || n > t.latest() {
		return nil, false
	}
	return t.versions[n-1], true
}

// instance is an EC2 instance launched by an Auto Scaling group.
type instance struct {
	id, group, az, imageID, instanceType string
	ltID, ltName                         string
	ltVersion                            int64
	launchTime                           time.Time
	seq                                  int

	// state is the Auto Scaling lifecycle state (Pending ... Terminated).
	state string
	// ec2State is the EC2 instance state (pending, running, shutting-down, terminated).
	ec2State     ec2types.InstanceStateName
	protected    bool
	unhealthy    bool
	terminatedAt time.Time

	// cluster is the ECS cluster the instance's container agent registers in ("" = none); ciARN the container
	// instance once registered.
	cluster string
	ciARN   string

	// actions are the lifecycle actions of the transition the instance is waiting in (Pending:Wait or
	// Terminating:Wait), one per lifecycle hook.
	actions []*lifecycleAction
}

// EC2 instance state codes. Amazon EC2 API Reference, "InstanceState": 0 pending, 16 running, 32 shutting-down,
// 48 terminated.
func stateCode(s ec2types.InstanceStateName) int32 {
	switch s {
	case ec2types.InstanceStateNameRunning:
		return 16
	case ec2types.InstanceStateNameShuttingDown:
		return 32
	case ec2types.InstanceStateNameTerminated:
		return 48
	case ec2types.InstanceStateNameStopped: // a warm pool instance (warmpool.go)
		return 80
	}
	return 0
}

// CreateLaunchTemplate creates a launch template whose version 1 (the default) launches imageID as
// instanceType, and returns its id (lt-...). Setup helper: not counted as an API call.
func (s *ec2Service) CreateLaunchTemplate(name, imageID, instanceType string) (templateID string) {
	defer s.lock()()
	t := &launchTemplate{id: "lt-" + s.hex(17), name: name, createdAt: s.now(), defaultVersion: 1}
	t.versions = []*templateVersion{{number: 1, imageID: imageID, instanceType: instanceType, createdAt: s.now()}}
	s.templates[t.id] = t
	s.templateOrder = append(s.templateOrder, t.id)
	return t.id
}

// CreateLaunchTemplateVersion adds a version to the template that copies the latest version with imageID as its
// AMI and returns its number. As in EC2, the default version does not change. Test helper: not counted.
// It panics when the template does not exist.
func (s *ec2Service) CreateLaunchTemplateVersion(templateID, imageID string) (version int64) {
	defer s.lock()()
	t := s.templates[templateID]
	if t == nil {
		panic("sim: no launch template " + templateID)
	}
	src := t.versions[len(t.versions)-1]
	v := &templateVersion{number: t.latest() + 1, imageID: imageID, instanceType: src.instanceType, createdAt: s.now()}
	t.versions = append(t.versions, v)
	return v.number
}

// SetDefaultLaunchTemplateVersion makes version the template's default version (as ModifyLaunchTemplate does).
// Setup helper: not counted. It panics when the template or version does not exist.
func (s *ec2Service) SetDefaultLaunchTemplateVersion(templateID string, version int64) {
	defer s.lock()()
	t := s.templates[templateID]
	if t == nil || version < 1 || version > t.latest() {
		panic("sim: no launch template version " + templateID + ":" + strconv.FormatInt(version, 10))
	}
	t.defaultVersion = version
}

// LaunchTemplateView is a launch template as tests observe it.
type LaunchTemplateView struct {
	ID, Name       string
	DefaultVersion int64
	LatestVersion  int64
	// ImageIDs holds the AMI of each version, by version number.
	ImageIDs map[int64]string
}

// LaunchTemplate returns the template with id templateID.
func (s *ec2Service) LaunchTemplate(templateID string) (LaunchTemplateView, bool) {
	defer s.lock()()
	t := s.templates[templateID]
	if t == nil {
		return LaunchTemplateView{}, false
	}
	v := LaunchTemplateView{ID: t.id, Name: t.name, DefaultVersion: t.defaultVersion, LatestVersion: t.latest(),
		ImageIDs: map[int64]string{}}
	for _, tv := range t.versions {
		v.ImageIDs[tv.number] = tv.imageID
	}
	return v, true
}

// MarkImageUnhealthy makes every instance launched from imageID (from now on) boot normally but never register
// with ECS: its container agent never connects (field case C15).
func (s *ec2Service) MarkImageUnhealthy(imageID string) {
	defer s.lock()()
	s.unhealthyImages[imageID] = true
}

// MarkImageHealthy undoes MarkImageUnhealthy: instances launched from imageID from now on serve as any other.
func (s *ec2Service) MarkImageHealthy(imageID string) {
	defer s.lock()()
	delete(s.unhealthyImages, imageID)
}

// EC2Client is the simulated Amazon EC2 API. It implements awsapi.EC2 and, beyond it, ModifyLaunchTemplate.
type EC2Client struct{ s *ec2Service }

var _ awsapi.EC2 = (*EC2Client)(nil)

// findTemplate looks a template up by id or name with EC2's errors.
func (s *ec2Service) findTemplate(id, name *string) (*launchTemplate, error) {
	switch {
	case id != nil && name != nil:
		return nil, apiError("InvalidParameterCombination", "You must specify either the launch template ID or the launch template name in the request, but not both.")
	case id != nil:
		if !strings.HasPrefix(*id, "lt-") {
			return nil, apiError("InvalidLaunchTemplateId.Malformed", "The specified ID for the launch template (%s) is not valid. Launch template IDs must be in the form 'lt-xxxxxxxxxxxxxxxxx'.", *id)
		}
		t := s.templates[*id]
		if t == nil {
			return nil, apiError("InvalidLaunchTemplateId.NotFound", "The specified launch template, with template ID %s, does not exist.", *id)
		}
		return t, nil
	case name != nil:
		for _, tid := range s.templateOrder {
			if t := s.templates[tid]; t.name == *name {
				return t, nil
			}
		}
		return nil, apiError("InvalidLaunchTemplateName.NotFoundException", "The specified launch template, with template name %s, does not exist.", *name)
	}
	return nil, apiError("MissingParameter", "The request must contain the parameter LaunchTemplateId or LaunchTemplateName")
}

func (t *launchTemplate) describe(v *templateVersion) ec2types.LaunchTemplateVersion {
	return ec2types.LaunchTemplateVersion{
		LaunchTemplateId:   ptr(t.id),
		LaunchTemplateName: ptr(t.name),
		VersionNumber:      ptr(v.number),
		DefaultVersion:     ptr(v.number == t.defaultVersion),
		CreateTime:         ptr(v.createdAt),
		CreatedBy:          nilIfEmpty(v.createdBy),
		VersionDescription: nilIfEmpty(v.description),
		LaunchTemplateData: &ec2types.ResponseLaunchTemplateData{
			ImageId:      nilIfEmpty(v.imageID),
			InstanceType: ec2types.InstanceType(v.instanceType),
		},
	}
}

// DescribeLaunchTemplateVersions describes versions of one launch template, named by LaunchTemplateId or
// LaunchTemplateName. Versions may list numbers, "$Latest" and "$Default"; without Versions every version is
// returned, newest first, paged by MaxResults (1-200) and NextToken.
// Amazon EC2 API Reference, "DescribeLaunchTemplateVersions".
// Errors: InvalidLaunchTemplateId.NotFound, InvalidLaunchTemplateName.NotFoundException,
// InvalidLaunchTemplateId.VersionNotFound, InvalidParameterValue.
func (c *EC2Client) DescribeLaunchTemplateVersions(ctx context.Context, in *ec2.DescribeLaunchTemplateVersionsInput, _ ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "ec2:DescribeLaunchTemplateVersions")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ec2.DescribeLaunchTemplateVersionsInput{}
	}
	t, err := s.findTemplate(in.LaunchTemplateId, in.LaunchTemplateName)
	if err != nil {
		return nil, err
	}
	out := &ec2.DescribeLaunchTemplateVersionsOutput{}
	if len(in.Versions) > 0 {
		seen := map[int64]bool{}
		for _, ref := range in.Versions {
			v, ok := t.resolve(ref)
			if !ok {
				return nil, apiError("InvalidLaunchTemplateId.VersionNotFound", "Could not find launch template version %s for launch template ID %s.", ref, t.id)
			}
			if seen[v.number] {
				continue
			}
			seen[v.number] = true
			out.LaunchTemplateVersions = append(out.LaunchTemplateVersions, t.describe(v))
		}
		return out, nil
	}
	minV, maxV := int64(1), t.latest()
	if in.MinVersion != nil {
		if v, ok := t.resolve(*in.MinVersion); ok {
			minV = v.number
		}
	}
	if in.MaxVersion != nil {
		if v, ok := t.resolve(*in.MaxVersion); ok {
			maxV = v.number
		}
	}
	limit := int32(200)
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 200 {
			return nil, apiError("InvalidParameterValue", "Value ( %d ) for parameter maxResults is invalid. Parameter must be between 1 and 200.", *in.MaxResults)
		}
		limit = *in.MaxResults
	}
	start := maxV // newest first
	if in.NextToken != nil {
		n, err := parseToken(*in.NextToken, "ltv")
		if err != nil {
			return nil, apiError("InvalidParameterValue", "The specified NextToken is not valid.")
		}
		start = int64(n)
	}
	for n := start; n >= minV; n-- {
		if int32(len(out.LaunchTemplateVersions)) == limit {
			out.NextToken = ptr(makeToken("ltv", int(n)))
			break
		}
		out.LaunchTemplateVersions = append(out.LaunchTemplateVersions, t.describe(t.versions[n-1]))
	}
	return out, nil
}

// CreateLaunchTemplateVersion adds a version to a launch template and returns it. With SourceVersion the new
// version copies that version's data and the given LaunchTemplateData fields override it; without it only the
// given data is used. The new version number is the latest plus one, and the template's default version does
// not change.
// Amazon EC2 User Guide, "Modify a launch template (manage launch template versions)"; Amazon EC2 API Reference,
// "CreateLaunchTemplateVersion".
// Errors: MissingParameter, InvalidLaunchTemplateId.NotFound, InvalidLaunchTemplateId.VersionNotFound.
func (c *EC2Client) CreateLaunchTemplateVersion(ctx context.Context, in *ec2.CreateLaunchTemplateVersionInput, _ ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "ec2:CreateLaunchTemplateVersion")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.LaunchTemplateData == nil {
		return nil, apiError("MissingParameter", "The request must contain the parameter LaunchTemplateData")
	}
	t, err := s.findTemplate(in.LaunchTemplateId, in.LaunchTemplateName)
	if err != nil {
		return nil, err
	}
	v := &templateVersion{number: t.latest() + 1, createdAt: s.now()}
	if in.SourceVersion != nil {
		src, ok := t.resolve(*in.SourceVersion)
		if !ok {
			return nil, apiError("InvalidLaunchTemplateId.VersionNotFound", "Could not find launch template version %s for launch template ID %s.", *in.SourceVersion, t.id)
		}
		v.imageID, v.instanceType = src.imageID, src.instanceType
	}
	if in.LaunchTemplateData.ImageId != nil {
		v.imageID = *in.LaunchTemplateData.ImageId
	}
	if in.LaunchTemplateData.InstanceType != "" {
		v.instanceType = string(in.LaunchTemplateData.InstanceType)
	}
	if in.VersionDescription != nil {
		v.description = *in.VersionDescription
	}
	t.versions = append(t.versions, v)
	d := t.describe(v)
	return &ec2.CreateLaunchTemplateVersionOutput{LaunchTemplateVersion: &d}, nil
}

// ModifyLaunchTemplate sets a launch template's default version (DefaultVersion). It is not part of
// awsapi.EC2; reach it with a type assertion on Account.EC2().
// Amazon EC2 API Reference, "ModifyLaunchTemplate".
func (c *EC2Client) ModifyLaunchTemplate(ctx context.Context, in *ec2.ModifyLaunchTemplateInput, _ ...func(*ec2.Options)) (*ec2.ModifyLaunchTemplateOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "ec2:ModifyLaunchTemplate")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ec2.ModifyLaunchTemplateInput{}
	}
	t, err := s.findTemplate(in.LaunchTemplateId, in.LaunchTemplateName)
	if err != nil {
		return nil, err
	}
	if in.DefaultVersion != nil {
		v, ok := t.resolve(*in.DefaultVersion)
		if !ok || *in.DefaultVersion == "$Default" {
			return nil, apiError("InvalidLaunchTemplateId.VersionNotFound", "Could not find launch template version %s for launch template ID %s.", *in.DefaultVersion, t.id)
		}
		t.defaultVersion = v.number
	}
	return &ec2.ModifyLaunchTemplateOutput{LaunchTemplate: &ec2types.LaunchTemplate{
		LaunchTemplateId:     ptr(t.id),
		LaunchTemplateName:   ptr(t.name),
		DefaultVersionNumber: ptr(t.defaultVersion),
		LatestVersionNumber:  ptr(t.latest()),
		CreateTime:           ptr(t.createdAt),
	}}, nil
}

func (s *ec2Service) describeEC2Instance(in *instance) ec2types.Instance {
	out := ec2types.Instance{
		InstanceId:   ptr(in.id),
		ImageId:      ptr(in.imageID),
		InstanceType: ec2types.InstanceType(in.instanceType),
		LaunchTime:   ptr(in.launchTime),
		State:        &ec2types.InstanceState{Code: ptr(stateCode(in.ec2State)), Name: in.ec2State},
		Placement:    &ec2types.Placement{AvailabilityZone: ptr(in.az), Tenancy: ec2types.TenancyDefault},
	}
	// Amazon EC2 Auto Scaling User Guide, "Tag Auto Scaling groups and instances": instances carry the
	// aws:autoscaling:groupName tag and the group's tags that propagate at launch.
	tags := []ec2types.Tag{{Key: ptr("aws:autoscaling:groupName"), Value: ptr(in.group)}}
	if g := s.autoScaling.group(in.group); g != nil {
		for _, k := range sortedKeys(g.tags) {
			tags = append(tags, ec2types.Tag{Key: ptr(k), Value: ptr(g.tags[k])})
		}
	}
	out.Tags = tags
	if in.ec2State == ec2types.InstanceStateNameTerminated || in.ec2State == ec2types.InstanceStateNameShuttingDown {
		out.StateTransitionReason = ptr("User initiated")
		out.StateReason = &ec2types.StateReason{Code: ptr("Client.UserInitiatedShutdown"), Message: ptr("Client.UserInitiatedShutdown: User initiated shutdown")}
	}
	return out
}

// DescribeInstances describes instances by InstanceIds (every id must exist, or the call fails with
// InvalidInstanceID.NotFound; ids not of the form i-... fail with InvalidInstanceID.Malformed) or all instances,
// optionally narrowed by Filters (instance-id, instance-state-name, image-id, availability-zone, tag:<key>,
// tag-key). Terminated instances stay visible. Each instance is returned in its own reservation; paging by
// MaxResults (5-1000) and NextToken when InstanceIds is empty.
// Amazon EC2 API Reference, "DescribeInstances"; Amazon EC2 User Guide, "Terminate Amazon EC2 instances"
// (terminated instances remain visible for a while).
func (c *EC2Client) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "ec2:DescribeInstances")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ec2.DescribeInstancesInput{}
	}
	var list []*instance
	if len(in.InstanceIds) > 0 {
		if in.MaxResults != nil {
			return nil, apiError("InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
		}
		var missing []string
		for _, id := range in.InstanceIds {
			if !strings.HasPrefix(id, "i-") {
				return nil, apiError("InvalidInstanceID.Malformed", "Invalid id: \"%s\"", id)
			}
			inst := s.instance(id)
			if inst == nil {
				missing = append(missing, id)
				continue
			}
			list = append(list, inst)
		}
		if len(missing) == 1 {
			return nil, apiError("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", missing[0])
		}
		if len(missing) > 1 {
			return nil, apiError("InvalidInstanceID.NotFound", "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
		}
	} else {
		for _, id := range s.instanceOrder {
			list = append(list, s.instance(id))
		}
	}
	var kept []*instance
	for _, inst := range list {
		ok, err := s.instanceMatches(inst, in.Filters)
		if err != nil {
			return nil, err
		}
		if ok {
			kept = append(kept, inst)
		}
	}
	out := &ec2.DescribeInstancesOutput{}
	start := 0
	if in.NextToken != nil {
		n, err := parseToken(*in.NextToken, "inst")
		if err != nil {
			return nil, apiError("InvalidParameterValue", "The specified NextToken is not valid.")
		}
		start = n
	}
	limit := len(kept)
	if in.MaxResults != nil {
		if *in.MaxResults < 5 || *in.MaxResults > 1000 {
			return nil, apiError("InvalidParameterValue", "Value ( %d ) for parameter maxResults is invalid. Expecting a value greater than 5.", *in.MaxResults)
		}
		limit = int(*in.MaxResults)
	}
	for _, inst := range kept {
		if inst.seq < start {
			continue
		}
		if len(out.Reservations) == limit {
			out.NextToken = ptr(makeToken("inst", inst.seq))
			break
		}
		out.Reservations = append(out.Reservations, ec2types.Reservation{
			ReservationId: ptr("r-" + inst.id[2:]),
			OwnerId:       ptr(s.opts.AccountID),
			Instances:     []ec2types.Instance{s.describeEC2Instance(inst)},
		})
	}
	return out, nil
}

func (s *ec2Service) instanceMatches(inst *instance, filters []ec2types.Filter) (bool, error) {
	tags := map[string]string{"aws:autoscaling:groupName": inst.group}
	if g := s.autoScaling.group(inst.group); g != nil {
		for k, v := range g.tags {
			tags[k] = v
		}
	}
	for _, f := range filters {
		if f.Name == nil {
			return false, apiError("InvalidParameterValue", "The filter 'null' is invalid")
		}
		name := *f.Name
		var values []string
		switch {
		case name == "instance-id":
			values = []string{inst.id}
		case name == "instance-state-name":
			values = []string{string(inst.ec2State)}
		case name == "image-id":
			values = []string{inst.imageID}
		case name == "availability-zone":
			values = []string{inst.az}
		case name == "tag-key":
			values = sortedKeys(tags)
		case strings.HasPrefix(name, "tag:"):
			if v, ok := tags[strings.TrimPrefix(name, "tag:")]; ok {
				values = []string{v}
			}
		default:
			return false, apiError("InvalidParameterValue", "The filter '%s' is invalid", name)
		}
		if !anyIn(values, f.Values) {
			return false, nil
		}
	}
	return true, nil
}

func anyIn(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if h == w {
				return true
			}
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// makeToken and parseToken implement opaque paging tokens that carry the position to resume from.
func makeToken(kind string, n int) string { return kind + "-" + strconv.Itoa(n) }

func parseToken(tok, kind string) (int, error) {
	rest, ok := strings.CutPrefix(tok, kind+"-")
	if !ok {
		return 0, strconv.ErrSyntax
	}
	return strconv.Atoi(rest)
}

// instance returns the instance with the id, or nil.
func (s *ec2Service) instance(id string) *instance { return s.instances[id] }

// addInstance records a launched instance and numbers it in launch order.
func (s *ec2Service) addInstance(inst *instance) {
	inst.seq = len(s.instanceOrder) + 1
	s.instances[inst.id] = inst
	s.instanceOrder = append(s.instanceOrder, inst.id)
}

// template returns the launch template with the id, or nil.
func (s *ec2Service) template(id string) *launchTemplate { return s.templates[id] }

// templateNamed returns the launch template with the name (unique, CreateLaunchTemplate), or nil.
func (s *ec2Service) templateNamed(name string) *launchTemplate {
	var t *launchTemplate
	for _, id := range s.templateOrder {
		if s.templates[id].name == name {
			t = s.templates[id]
		}
	}
	return t
}

// addHiddenTemplate records the launch template behind a launch configuration: not in templateOrder, so no
// lookup by name finds it.
func (s *ec2Service) addHiddenTemplate(t *launchTemplate) { s.templates[t.id] = t }

// imageUnhealthy reports whether instances launched from the image never become healthy (MarkImageUnhealthy).
func (s *ec2Service) imageUnhealthy(imageID string) bool { return s.unhealthyImages[imageID] }

// addVersionFromLatest adds a version of template id that copies its latest version but launches imageID (as
// EKS's setup phase of a node group update does), and returns its number.
func (s *ec2Service) addVersionFromLatest(id, imageID, description string) int64 {
	t := s.templates[id]
	src := t.versions[len(t.versions)-1]
	v := &templateVersion{number: t.latest() + 1, imageID: imageID, instanceType: src.instanceType, description: description, createdAt: s.now()}
	t.versions = append(t.versions, v)
	return v.number
}
