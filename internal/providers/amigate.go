package providers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// The AMI gate (field case C20, invariant 10 of docs/architecture.md): an AMI id a parameter names is a claim.
// Before a rollout may prepare a launch template version, EC2 must confirm that the image exists and is
// available, that its owner is allowed, that every instance type the group can launch runs its architecture,
// and that it is of the OS family the group runs now.

// OS families of an AMI, as DescribeOSFamily tells them.
const (
	OSFamilyAL2          = "al2"
	OSFamilyAL2023       = "al2023"
	OSFamilyBottlerocket = "bottlerocket"
	OSFamilyWindows      = "windows"
	OSFamilyOther        = "other"
	// OSFamilyUnclear is an AMI whose name (or description) names more than one family (DescribeOSFamily).
	OSFamilyUnclear = "unclear"
)

// Reasons of a refusal: the Reason dimension of the AMIRejected metric and the rejectReason of the
// "ami-rejected" notification.
const (
	RejectImageNotFound        = "ImageNotFound"
	RejectImageNotAvailable    = "ImageNotAvailable"
	RejectOwnerNotAllowed      = "OwnerNotAllowed"
	RejectArchitectureMismatch = "ArchitectureMismatch"
	RejectOSFamilyChange       = "OSFamilyChange"
	// RejectCurrentFamilyUnknown: the AMI the group runs now cannot be described, so a family change cannot be
	// ruled out.
	RejectCurrentFamilyUnknown = "CurrentFamilyUnknown"
)

// defaultAMIGateTTL is how long a DescribeImages answer (and the launch template version a group resolves to)
// is reused while a rollout waits, so that a refusal waiting for a fixed parameter does not call EC2 every tick.
const defaultAMIGateTTL = 5 * time.Minute

// defaultAMIGateFreshTTL is how old an answer a fresh check (GateRequest.Fresh, just before Preparing) may
// reuse: about one pass (8 s budget), so that 1,000 groups moving to one shared AMI in a pass read its
// DescribeImages once, not 1,000 times, and an image deregistered minutes into a soak is still seen.
const defaultAMIGateFreshTTL = 10 * time.Second

// maxInstanceTypesPerGateCall bounds DescribeInstanceTypes' InstanceTypes (Amazon EC2 API Reference,
// "DescribeInstanceTypes": up to 100 instance types per request).
const maxInstanceTypesPerGateCall = 100

// AMIGate checks a target AMI against EC2 before any launch template change. Safe for concurrent use.
type AMIGate struct {
	// EC2 describes images (DescribeImages) and launch template versions.
	EC2 awsapi.EC2
	// InstanceTypes describes instance types (their supported architectures); nil holds every group that has
	// an instance type (an architecture that cannot be checked is not passed).
	InstanceTypes awsapi.EC2InstanceTypes
	// AccountID is the agent's own AWS account: its AMIs are always allowed ("" when unknown: then only
	// the owners listed are).
	AccountID string
	// AllowedOwners are owners every group accepts (--allowed-ami-owners): account ids or owner aliases.
	AllowedOwners []string
	Clock         clock.PassiveClock
	// TTL is how long answers are reused by cached checks; default 5 minutes.
	TTL time.Duration
	// FreshTTL is how old an answer fresh checks reuse (measured from when its read began); default 10
	// seconds, never above TTL.
	FreshTTL time.Duration

	mu        sync.Mutex
	flights   map[string]chan struct{}               // one read at a time per image id (and for instance types)
	images    map[string]cachedImage                 // by image id
	templates map[string]cachedTemplate              // by launch template reference
	archs     map[string][]ec2types.ArchitectureType // by instance type; never expires
}

type cachedImage struct {
	img *ec2types.Image // nil: EC2 does not know the image
	at  time.Time
}

type cachedTemplate struct {
	v  TemplateVersion
	at time.Time
}

// GateRequest is what the gate checks: the target AMI for one group.
type GateRequest struct {
	Target model.Target
	// Group is the group as described this tick (its launch template reference and mixed instances overrides).
	Group astypes.AutoScalingGroup
	// View is the group's instances (their AMIs tell the current AMI when the template names no AMI id).
	View model.GroupView
	// ImageID is the AMI to check; Parameter the source that names it.
	ImageID, Parameter string
	// Fresh asks EC2 again instead of reusing answers younger than the TTL: the check made just before the
	// rollout leaves Waiting for Preparing.
	Fresh bool
}

// Check returns nil when the AMI passes the gate, the refusal when it does not, and an error when EC2 could not
// be asked (throttling, AccessDenied): the caller holds and retries; an error never passes.
//
// Rules, each on EC2's own answer:
//   - DescribeImages (Amazon EC2 API Reference, "DescribeImages"; "Image": State) must know the image and
//     report State available (not pending, failed, deregistered, ...);
//   - its OwnerId or ImageOwnerAlias must be allowed: the agent's account, alias "amazon" when the parameter is
//     an AWS public parameter (/aws/service/...), AllowedOwners and the group's TagAllowedAMIOwners;
//   - its Architecture must be among ProcessorInfo.SupportedArchitectures (DescribeInstanceTypes) of every
//     instance type the group can launch: the resolved launch template version's InstanceType and every
//     mixed instances override's InstanceType (attribute-based selection picks types that match the AMI);
//   - its OS family (DescribeOSFamily) must equal that of the group's current AMI — the AMI of the launch
//     template version the group resolves to now, or, when that names no AMI id (resolve:ssm:), the AMI most
//     of its instances run — unless the group carries TagAllowAMIFamilyChange=true.
func (g *AMIGate) Check(ctx context.Context, req GateRequest) (*model.AMIRejection, error) {
	target, err := g.image(ctx, req.ImageID, req.Fresh)
	if err != nil {
		return nil, err
	}
	reject := func(reason, format string, args ...any) (*model.AMIRejection, error) {
		return &model.AMIRejection{ImageID: req.ImageID, Reason: reason, Detail: fmt.Sprintf(format, args...)}, nil
	}
	if target == nil {
		return reject(RejectImageNotFound, "does not exist in EC2 (DescribeImages does not know it: never registered, or deregistered)")
	}
	if target.State != ec2types.ImageStateAvailable {
		return reject(RejectImageNotAvailable, "is %s, not available", target.State)
	}
	allowed := g.allowedOwners(req)
	if !slices.Contains(allowed, aws.ToString(target.OwnerId)) && (aws.ToString(target.ImageOwnerAlias) == "" ||
		!slices.Contains(allowed, aws.ToString(target.ImageOwnerAlias))) {
		owner := aws.ToString(target.OwnerId)
		if alias := aws.ToString(target.ImageOwnerAlias); alias != "" {
			owner += " (" + alias + ")"
		}
		return reject(RejectOwnerNotAllowed, "is owned by %s, not by an allowed owner [%s]; allow it with --allowed-ami-owners or tag %s",
			owner, strings.Join(allowed, ", "), model.TagAllowedAMIOwners)
	}
	ref, err := TemplateRef(req.Group)
	if err != nil {
		return nil, err
	}
	current, err := g.template(ctx, ref, req.Fresh)
	if err != nil {
		return nil, err
	}
	if rej, err := g.checkArchitecture(ctx, req, target, current); rej != nil || err != nil {
		return rej, err
	}
	if req.Target.Policy.AllowAMIFamilyChange {
		return nil, nil
	}
	currentID := current.ImageID
	if !strings.HasPrefix(currentID, "ami-") {
		currentID = majorityImage(req.View)
	}
	if currentID == req.ImageID {
		return nil, nil
	}
	want := DescribeOSFamily(*target)
	if currentID == "" {
		return reject(RejectCurrentFamilyUnknown, "(%s) cannot be compared with the group's current AMI: its launch template names none and no instance runs; tag %s=true to roll it anyway",
			want, model.TagAllowAMIFamilyChange)
	}
	cur, err := g.image(ctx, currentID, req.Fresh)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		return reject(RejectCurrentFamilyUnknown, "(%s) cannot be compared with the group's current AMI %s, which EC2 no longer describes; tag %s=true to roll it anyway",
			want, currentID, model.TagAllowAMIFamilyChange)
	}
	if have := DescribeOSFamily(*cur); have != want {
		return reject(RejectOSFamilyChange, "is %s but the group runs %s (%s); tag %s=true to allow the change",
			want, have, currentID, model.TagAllowAMIFamilyChange)
	}
	return nil, nil
}

// checkArchitecture refuses an AMI whose architecture some instance type of the group cannot run.
func (g *AMIGate) checkArchitecture(ctx context.Context, req GateRequest, img *ec2types.Image, current TemplateVersion) (*model.AMIRejection, error) {
	types := map[string]bool{}
	if current.InstanceType != "" {
		types[current.InstanceType] = true
	}
	if mip := req.Group.MixedInstancesPolicy; mip != nil && mip.LaunchTemplate != nil {
		for _, o := range mip.LaunchTemplate.Overrides {
			if it := aws.ToString(o.InstanceType); it != "" {
				types[it] = true
			}
		}
	}
	if len(types) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(types))
	for t := range types {
		names = append(names, t)
	}
	sort.Strings(names)
	archs, err := g.architectures(ctx, names)
	if err != nil {
		return nil, err
	}
	var cannot []string
	for _, t := range names {
		if !slices.Contains(archs[t], ec2types.ArchitectureType(img.Architecture)) {
			cannot = append(cannot, fmt.Sprintf("%s (%s)", t, joinArchs(archs[t])))
		}
	}
	if len(cannot) > 0 {
		return &model.AMIRejection{ImageID: req.ImageID, Reason: RejectArchitectureMismatch,
			Detail: fmt.Sprintf("is %s but the group can launch %s", img.Architecture, strings.Join(cannot, ", "))}, nil
	}
	return nil, nil
}

// allowedOwners lists the owners the group accepts, in the order they are explained.
func (g *AMIGate) allowedOwners(req GateRequest) []string {
	var out []string
	if g.AccountID != "" {
		out = append(out, g.AccountID)
	}
	if strings.HasPrefix(req.Parameter, "/aws/service/") {
		out = append(out, "amazon")
	}
	for _, o := range append(slices.Clone(g.AllowedOwners), req.Target.Policy.AllowedAMIOwners...) {
		if o == "self" {
			o = g.AccountID
		}
		if o != "" && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

func (g *AMIGate) ttl() time.Duration {
	if g.TTL > 0 {
		return g.TTL
	}
	return defaultAMIGateTTL
}

// maxAge is how old a reused answer may be: TTL, or FreshTTL (at most TTL) for a fresh check.
func (g *AMIGate) maxAge(fresh bool) time.Duration {
	if !fresh {
		return g.ttl()
	}
	if g.FreshTTL > 0 {
		return min(g.FreshTTL, g.ttl())
	}
	return min(defaultAMIGateFreshTTL, g.ttl())
}

// flight takes the one read slot of key (waiting for a read of it in progress, or ctx), so that the checks
// of many groups gating one AMI at once make one DescribeImages call and the others reuse its answer; the
// caller looks at the cache after taking it and calls release when done.
func (g *AMIGate) flight(ctx context.Context, key string) (release func(), err error) {
	g.mu.Lock()
	if g.flights == nil {
		g.flights = map[string]chan struct{}{}
	}
	slot, ok := g.flights[key]
	if !ok {
		slot = make(chan struct{}, 1)
		g.flights[key] = slot
	}
	g.mu.Unlock()
	select {
	case slot <- struct{}{}:
		return func() { <-slot }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// image describes one AMI (nil when EC2 does not know it), from an answer younger than maxAge(fresh), or
// else from one DescribeImages call that concurrent checks of the same id wait for and share.
func (g *AMIGate) image(ctx context.Context, id string, fresh bool) (*ec2types.Image, error) {
	release, err := g.flight(ctx, "image/"+id)
	if err != nil {
		return nil, fmt.Errorf("describing AMI %s: %w", id, err)
	}
	defer release()
	now := g.Clock.Now()
	g.mu.Lock()
	c, ok := g.images[id]
	g.mu.Unlock()
	if ok && (now.Sub(c.at) < g.maxAge(fresh) || c.at.Equal(now)) {
		return c.img, nil // an answer of this very instant is fresh
	}
	out, err := g.EC2.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{id}})
	var img *ec2types.Image
	switch {
	case awsapi.IsImageNotFound(err):
		// Unknown, or deregistered long enough ago that EC2 no longer lists it.
	case err != nil:
		return nil, fmt.Errorf("describing AMI %s: %w", id, err)
	default:
		for i := range out.Images {
			if aws.ToString(out.Images[i].ImageId) == id {
				img = &out.Images[i]
			}
		}
	}
	g.mu.Lock()
	if g.images == nil {
		g.images = map[string]cachedImage{}
	}
	g.images[id] = cachedImage{img: img, at: now}
	g.mu.Unlock()
	return img, nil
}

// template resolves the launch template version ref names now, from the cache unless fresh.
func (g *AMIGate) template(ctx context.Context, ref state.LaunchTemplateRef, fresh bool) (TemplateVersion, error) {
	key := ref.ID + "/" + ref.Name + "@" + ref.Version
	now := g.Clock.Now()
	g.mu.Lock()
	c, ok := g.templates[key]
	g.mu.Unlock()
	if ok && (!fresh && now.Sub(c.at) < g.ttl() || c.at.Equal(now)) {
		return c.v, nil
	}
	v, err := Templates{EC2: g.EC2}.Resolve(ctx, ref)
	if err != nil {
		return TemplateVersion{}, err
	}
	g.mu.Lock()
	if g.templates == nil {
		g.templates = map[string]cachedTemplate{}
	}
	g.templates[key] = cachedTemplate{v: v, at: now}
	g.mu.Unlock()
	return v, nil
}

// architectures returns the supported architectures of each instance type, asking EC2 (100 per call) only for
// types not cached: an instance type's architectures never change.
func (g *AMIGate) architectures(ctx context.Context, types []string) (map[string][]ec2types.ArchitectureType, error) {
	release, err := g.flight(ctx, "instance-types") // concurrent checks wait for one read of a missing type
	if err != nil {
		return nil, fmt.Errorf("describing instance types %v: %w", types, err)
	}
	defer release()
	g.mu.Lock()
	var missing []ec2types.InstanceType
	for _, t := range types {
		if _, ok := g.archs[t]; !ok {
			missing = append(missing, ec2types.InstanceType(t))
		}
	}
	g.mu.Unlock()
	if len(missing) > 0 && g.InstanceTypes == nil {
		return nil, errors.New("checking the AMI's architecture: no EC2 DescribeInstanceTypes client configured")
	}
	for start := 0; start < len(missing); start += maxInstanceTypesPerGateCall {
		batch := missing[start:min(start+maxInstanceTypesPerGateCall, len(missing))]
		p := ec2.NewDescribeInstanceTypesPaginator(g.InstanceTypes, &ec2.DescribeInstanceTypesInput{InstanceTypes: batch})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("describing instance types %v: %w", batch, err)
			}
			g.mu.Lock()
			if g.archs == nil {
				g.archs = map[string][]ec2types.ArchitectureType{}
			}
			for _, it := range out.InstanceTypes {
				if it.ProcessorInfo != nil {
					g.archs[string(it.InstanceType)] = it.ProcessorInfo.SupportedArchitectures
				}
			}
			g.mu.Unlock()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string][]ec2types.ArchitectureType, len(types))
	for _, t := range types {
		a, ok := g.archs[t]
		if !ok {
			return nil, fmt.Errorf("EC2 did not describe instance type %s", t)
		}
		out[t] = a
	}
	return out, nil
}
