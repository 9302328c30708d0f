package sim

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// AMIs: what DescribeImages reports of them (their creation date above all), and the AMI an instance launches
// from when its launch template names a Systems Manager parameter instead of an AMI id.
//
// An AMI the account never registered may still be launched (the simulation checks no image id); only
// DescribeImages does not know it, as EC2 does not know an AMI deregistered long ago.

// resolveSSMPrefix introduces a Systems Manager parameter in a launch template's ImageId (Amazon EC2 User Guide,
// "Use a Systems Manager parameter instead of an AMI ID": "resolve:ssm:parameter-name",
// "resolve:ssm:parameter-name:version-number" or "resolve:ssm:parameter-name:label").
const resolveSSMPrefix = "resolve:ssm:"

// Owner of the simulated public AMIs: Amazon's account and alias.
const (
	amazonOwnerID    = "591542846629"
	amazonOwnerAlias = "amazon"
)

// image is one registered AMI.
type image struct {
	id, name, arch, description string
	created, deprecated         time.Time
	seq                         int

	state                                ec2types.ImageState
	ownerID, ownerAlias, platformDetails string
	platform                             ec2types.PlatformValues
}

// ImageSpec describes an AMI to register with RegisterImage. The fields are those DescribeImages returns
// (Amazon EC2 API Reference, "Image").
type ImageSpec struct {
	ID, Name, Description string
	// Architecture is x86_64 (default) or arm64.
	Architecture string
	// Created is the AMI's CreationDate.
	Created time.Time
	// Deprecated is the AMI's DeprecationTime; zero: never. Once past, DescribeImages leaves the AMI out unless
	// it is named in ImageIds or IncludeDeprecated is set.
	Deprecated time.Time
	// State is pending, available (default), invalid, deregistered, transient, failed, error or disabled.
	State ec2types.ImageState
	// OwnerID is the owning account; default Amazon's (591542846629). OwnerAlias is the ImageOwnerAlias
	// (amazon | aws-marketplace | aws-backup-vault); default "amazon" for Amazon's account, "" for others.
	OwnerID, OwnerAlias string
	// Platform is "windows" for Windows AMIs, else blank. PlatformDetails is the billing platform; default
	// "Windows" for Windows AMIs, else "Linux/UNIX".
	Platform        ec2types.PlatformValues
	PlatformDetails string
}

// RegisterImage registers (or replaces) an AMI. Without OwnerID it is owned by Amazon and public, as the ECS-
// and EKS-optimized AMIs are. Setup helper: not counted.
func (s *ec2Service) RegisterImage(spec ImageSpec) {
	defer s.lock()()
	arch := spec.Architecture
	if arch == "" {
		arch = string(ec2types.ArchitectureValuesX8664)
	}
	img := &image{id: spec.ID, name: spec.Name, arch: arch, description: spec.Description, created: spec.Created,
		deprecated: spec.Deprecated, state: spec.State, ownerID: spec.OwnerID, ownerAlias: spec.OwnerAlias,
		platform: spec.Platform, platformDetails: spec.PlatformDetails}
	if img.state == "" {
		img.state = ec2types.ImageStateAvailable
	}
	if img.ownerID == "" {
		img.ownerID = amazonOwnerID
	}
	if img.ownerID == amazonOwnerID && img.ownerAlias == "" {
		img.ownerAlias = amazonOwnerAlias
	}
	if img.platformDetails == "" {
		img.platformDetails = "Linux/UNIX"
		if img.platform == ec2types.PlatformValuesWindows {
			img.platformDetails = "Windows"
		}
	}
	if old := s.images[spec.ID]; old != nil {
		img.seq = old.seq
	} else {
		img.seq = len(s.imageOrder) + 1
		s.imageOrder = append(s.imageOrder, spec.ID)
	}
	s.images[spec.ID] = img
}

// launchImageID returns the AMI an instance launched from a template version whose ImageId is ref runs: ref
// itself, or for "resolve:ssm:<parameter>[:<version>]" the AMI id the parameter names at launch (Amazon EC2
// User Guide, "Use a Systems Manager parameter instead of an AMI ID": the parameter is resolved each time an
// instance launches). A reference that does not resolve to an AMI id is returned as written. Callers hold the lock.
func (s *ec2Service) launchImageID(ref string) string {
	name, ok := strings.CutPrefix(ref, resolveSSMPrefix)
	if !ok {
		return ref
	}
	var version int64
	if i := strings.LastIndex(name, ":"); i > 0 {
		if n, err := strconv.ParseInt(name[i+1:], 10, 64); err == nil {
			name, version = name[:i], n
		}
	}
	p := s.ssm.parameter(name)
	if p == nil || len(p.versions) == 0 || version > int64(len(p.versions)) {
		return ref
	}
	v := p.versions[len(p.versions)-1]
	if version > 0 {
		v = p.versions[version-1]
	}
	if !strings.HasPrefix(v.value, "ami-") {
		return ref
	}
	return v.value
}

// SetImageState changes a registered AMI's State, as EC2 does when a new AMI becomes available (pending ->
// available) or is deregistered (Amazon EC2 User Guide, "Deregister an AMI": a deregistered AMI is still
// described for a short while, in state deregistered, and cannot launch instances). Setup helper: not
// counted. It panics when the AMI is not registered.
func (s *ec2Service) SetImageState(id string, state ec2types.ImageState) {
	defer s.lock()()
	if s.images[id] == nil {
		panic("sim: no image " + id)
	}
	s.images[id].state = state
}

// ImageRegistered reports whether DescribeImages knows the AMI. Observation helper: not counted.
func (s *ec2Service) ImageRegistered(id string) bool {
	defer s.lock()()
	return s.images[id] != nil
}

func (img *image) describe() ec2types.Image {
	out := ec2types.Image{
		ImageId:            ptr(img.id),
		Name:               nilIfEmpty(img.name),
		Description:        nilIfEmpty(img.description),
		Architecture:       ec2types.ArchitectureValues(img.arch),
		CreationDate:       ptr(awsTime(img.created)),
		State:              img.state,
		OwnerId:            ptr(img.ownerID),
		ImageOwnerAlias:    nilIfEmpty(img.ownerAlias),
		Public:             ptr(img.ownerID == amazonOwnerID),
		Platform:           img.platform,
		ImageType:          ec2types.ImageTypeValuesMachine,
		RootDeviceType:     ec2types.DeviceTypeEbs,
		RootDeviceName:     ptr("/dev/xvda"),
		VirtualizationType: ec2types.VirtualizationTypeHvm,
		Hypervisor:         ec2types.HypervisorTypeXen,
		PlatformDetails:    ptr(img.platformDetails),
		UsageOperation:     ptr("RunInstances"),
		EnaSupport:         ptr(true),
	}
	if !img.deprecated.IsZero() {
		out.DeprecationTime = ptr(awsTime(img.deprecated))
	}
	return out
}

// DescribeImages describes AMIs: those named in ImageIds (each must exist: InvalidAMIID.NotFound, or
// InvalidAMIID.Malformed for an id not of the form ami-...; deprecated ones included), or every registered AMI
// narrowed by Filters (image-id, name, architecture, owner-alias, owner-id, state), deprecated ones only with
// IncludeDeprecated, paged by MaxResults (5-1000) and NextToken. CreationDate and DeprecationTime are
// ISO 8601 in UTC with milliseconds ("2024-11-15T00:22:13.000Z"). Each image carries State, OwnerId,
// ImageOwnerAlias, Architecture, Platform, PlatformDetails, Name and Description as registered (Amazon EC2 API
// Reference, "Image"); a deregistered image is still described, in state deregistered, until it is removed.
// Amazon EC2 API Reference, "DescribeImages". Errors: InvalidAMIID.NotFound, InvalidAMIID.Malformed,
// InvalidParameterCombination, InvalidParameterValue.
func (c *EC2Client) DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, _ ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "ec2:DescribeImages")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ec2.DescribeImagesInput{}
	}
	images, order := s.images, s.imageOrder
	var list []*image
	if len(in.ImageIds) > 0 {
		if in.MaxResults != nil {
			return nil, apiError("InvalidParameterCombination", "The parameter imagesSet cannot be used with the parameter maxResults")
		}
		var missing []string
		for _, id := range in.ImageIds {
			if !strings.HasPrefix(id, "ami-") {
				return nil, apiError("InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")", id)
			}
			if img := images[id]; img != nil {
				list = append(list, img)
			} else {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return nil, apiError("InvalidAMIID.NotFound", "The image ids '[%s]' do not exist", strings.Join(missing, ", "))
		}
	} else {
		includeDeprecated := in.IncludeDeprecated != nil && *in.IncludeDeprecated
		for _, id := range order {
			img := images[id]
			if !includeDeprecated && !img.deprecated.IsZero() && !img.deprecated.After(s.now()) {
				continue
			}
			list = append(list, img)
		}
	}
	var kept []*image
	for _, img := range list {
		ok, err := imageMatches(img, in.Filters)
		if err != nil {
			return nil, err
		}
		if ok {
			kept = append(kept, img)
		}
	}
	limit := len(kept)
	if in.MaxResults != nil {
		if *in.MaxResults < 5 || *in.MaxResults > 1000 {
			return nil, apiError("InvalidParameterValue", "Value ( %d ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", *in.MaxResults)
		}
		limit = int(*in.MaxResults)
	}
	start := 0
	if in.NextToken != nil {
		n, err := parseToken(*in.NextToken, "img")
		if err != nil {
			return nil, apiError("InvalidParameterValue", "The specified NextToken is not valid.")
		}
		start = n
	}
	out := &ec2.DescribeImagesOutput{Images: []ec2types.Image{}}
	for _, img := range kept {
		if img.seq < start {
			continue
		}
		if len(out.Images) == limit {
			out.NextToken = ptr(makeToken("img", img.seq))
			break
		}
		out.Images = append(out.Images, img.describe())
	}
	return out, nil
}

func imageMatches(img *image, filters []ec2types.Filter) (bool, error) {
	for _, f := range filters {
		if f.Name == nil {
			return false, apiError("InvalidParameterValue", "The filter 'null' is invalid")
		}
		var have string
		switch *f.Name {
		case "image-id":
			have = img.id
		case "name":
			have = img.name
		case "architecture":
			have = img.arch
		case "owner-alias":
			have = img.ownerAlias
		case "owner-id":
			have = img.ownerID
		case "state":
			have = string(img.state)
		default:
			return false, apiError("InvalidParameterValue", "The filter '%s' is invalid", *f.Name)
		}
		if !anyIn([]string{have}, f.Values) {
			return false, nil
		}
	}
	return true, nil
}
