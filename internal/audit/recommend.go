package audit

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// Public parameters of the Amazon ECS-optimized Amazon Linux 2023 AMI, the recommended AMI of ECS groups by
// architecture (Amazon ECS Developer Guide, "Retrieving Amazon ECS-optimized Linux AMI metadata"). Their value
// is a JSON document whose image_id names the AMI.
const (
	ECSParameterX86_64 = "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended"
	ECSParameterARM64  = "/aws/service/ecs/optimized-ami/amazon-linux-2023/arm64/recommended"
)

// resolveSSMPrefix introduces a Systems Manager parameter in a launch template's ImageId (Amazon EC2 User Guide,
// "Use a Systems Manager parameter instead of an AMI ID": resolve:ssm:<name>, resolve:ssm:<name>:<version> or
// resolve:ssm:<name>:<label>).
const resolveSSMPrefix = "resolve:ssm:"

// maxHistoryPerPage: GetParameterHistory MaxResults, 1 to 50 (AWS Systems Manager API Reference).
const maxHistoryPerPage = 50

// recommendedParameter sets the parameter naming a group's recommended AMI: its patch-agent/ami-parameter tag;
// else for ECS the public parameter of its ECS-optimized AMI family (tag patch-agent/ami-family, else the
// family of the AMI it launches or runs, else AL2023; ECSParameterPath) and architecture; for EKS the EKS-optimized parameter of
// its cluster's Kubernetes version (or tag patch-agent/kubernetes-version), its AMI family (tag
// patch-agent/ami-family, else its managed node group's AMI type, else AL2023) and its architecture.
func (w *run) recommendedParameter(ctx context.Context, s *subject) {
	g := s.out
	if p := strings.TrimSpace(s.tags[model.TagParameter]); p != "" && p != providers.ParameterAuto {
		g.RecommendedParameter = p
		return
	}
	if g.Platform == PlatformUnknown {
		g.Notes = append(g.Notes, fmt.Sprintf("platform unknown: no ECS capacity provider, EKS node group or cluster tag names the group; tag it %s=ecs|eks and %s, or set %s",
			model.TagPlatform, model.TagCluster, model.TagParameter))
		return
	}
	if g.Architecture == "" {
		g.Notes = append(g.Notes, "no recommended AMI: the group's architecture is unknown (set tag "+providers.TagArchitecture+")")
		return
	}
	if g.Platform == PlatformECS {
		family, from := w.ecsFamily(s, s.tags[providers.TagAMIFamily])
		g.AMIFamily = family
		path, err := ECSParameterPath(family, g.Architecture)
		if err != nil {
			g.Notes = append(g.Notes, "no recommended ECS AMI: "+err.Error())
			return
		}
		g.RecommendedParameter = path
		if from == "default" {
			g.Notes = append(g.Notes, fmt.Sprintf("AMI family unknown (no tag %s, no ECS-optimized AMI name in use): compared with %s; tag the group if it runs another family",
				providers.TagAMIFamily, family))
		}
		return
	}
	version := strings.TrimSpace(s.tags[providers.TagKubernetesVersion])
	if version == "" {
		c, err := w.clusters.Describe(ctx, g.Cluster)
		if err != nil {
			g.Notes = append(g.Notes, fmt.Sprintf("no recommended AMI: EKS cluster %s: %v", g.Cluster, err))
			return
		}
		version = c.Version
	}
	family := strings.ToLower(strings.TrimSpace(s.tags[providers.TagAMIFamily]))
	if family == "" {
		family = s.eksFamily
	}
	if family == "" && g.Nodegroup != "" && g.AMIType != "CUSTOM" {
		g.Notes = append(g.Notes, fmt.Sprintf("no public AMI parameter for AMI type %s (set tag %s)", g.AMIType, model.TagParameter))
		return
	}
	if family == "" {
		family = eks.FamilyAL2023
	}
	path, err := eks.ParameterPath(family, version, g.Architecture)
	if err != nil {
		g.Notes = append(g.Notes, "no recommended AMI: "+err.Error())
		return
	}
	g.RecommendedParameter = path
}

// resolveSSMRef splits "resolve:ssm:<name>[:<version or label>]" into the parameter reference GetParameters
// takes ("<name>" or "<name>:<selector>"); ok is false for an ImageId that is no such reference.
func resolveSSMRef(imageID string) (ref string, ok bool) {
	return strings.CutPrefix(imageID, resolveSSMPrefix)
}

// resolveParameters reads every recommended parameter and every parameter a launch template resolves, with
// GetParameters (10 per call, providers.Resolver), and sets each group's recommended AMI and the AMI a new
// instance gets.
func (w *run) resolveParameters(ctx context.Context, subjects []*subject) {
	var names []string
	for _, s := range subjects {
		if p := s.out.RecommendedParameter; p != "" {
			names = append(names, p)
		}
		if ref, ok := resolveSSMRef(s.out.ConfiguredImage); ok {
			names = append(names, ref)
		}
	}
	w.params = map[string]model.ResolvedAMI{}
	problems := map[string]string{}
	resolver := providers.Resolver{SSM: w.SSM}
	var plain []string
	for _, n := range dedupe(names) {
		if strings.Contains(strings.TrimPrefix(n, "/"), ":") {
			// A version or label selector: GetParameters answers under the bare name, so one call each.
			w.resolve(ctx, resolver, []string{n}, problems, func(string) string { return n })
			continue
		}
		plain = append(plain, n)
	}
	w.resolve(ctx, resolver, plain, problems, func(name string) string { return name })
	for _, s := range subjects {
		g := s.out
		if p := g.RecommendedParameter; p != "" {
			if rec, ok := w.params[p]; ok {
				g.RecommendedImageID = rec.ImageID
			} else if why, ok := problems[p]; ok {
				g.Notes = append(g.Notes, "recommended parameter "+why)
			}
		}
		switch ref, ok := resolveSSMRef(g.ConfiguredImage); {
		case ok:
			if rec, found := w.params[ref]; found {
				g.LaunchImageID = rec.ImageID
			} else if why, bad := problems[ref]; bad {
				g.Notes = append(g.Notes, "launch template parameter "+why)
			}
		case strings.HasPrefix(g.ConfiguredImage, "ami-"):
			g.LaunchImageID = g.ConfiguredImage
		}
	}
}

// resolve reads names with the resolver and files each result under key(name).
func (w *run) resolve(ctx context.Context, r providers.Resolver, names []string, problems map[string]string, key func(string) string) {
	if len(names) == 0 {
		return
	}
	found, missing, invalid, err := r.Resolve(ctx, names)
	if err != nil {
		w.warnf("%v", err)
		for _, n := range names {
			problems[n] = n + " could not be read"
		}
		return
	}
	for name, rec := range found {
		w.params[key(name)] = rec
	}
	for _, m := range missing {
		problems[m] = m + " does not exist"
	}
	for name, e := range invalid {
		problems[key(name)] = e.Error()
	}
}

// imageInfo is what DescribeImages told of an AMI.
type imageInfo struct {
	name    string
	created *time.Time
}

// describeImages reads the name and creation date of every AMI in use, recommended or launched that it has
// not read yet (it runs before the recommended AMIs are known, for the ECS family, and after), with
// DescribeImages (an image-id filter of 100 ids a call, deprecated AMIs included: a filter never fails on an
// AMI EC2 no longer knows, which stays unknown).
func (w *run) describeImages(ctx context.Context, subjects []*subject) {
	var ids []string
	for _, s := range subjects {
		for _, u := range s.out.InUse {
			ids = append(ids, u.ImageID)
		}
		ids = append(ids, s.out.RecommendedImageID, s.out.LaunchImageID)
	}
	ids = slices.DeleteFunc(dedupe(ids), func(id string) bool { _, known := w.images[id]; return known || id == "" })
	if w.images == nil {
		w.images = map[string]imageInfo{}
	}
	for start := 0; start < len(ids); start += maxFilterValues {
		batch := ids[start:min(start+maxFilterValues, len(ids))]
		p := ec2.NewDescribeImagesPaginator(w.EC2, &ec2.DescribeImagesInput{
			Filters:           []ec2types.Filter{{Name: aws.String("image-id"), Values: batch}},
			IncludeDeprecated: aws.Bool(true),
			MaxResults:        aws.Int32(maxInstancesPerPage),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				w.warnf("describing AMIs %s ...: %v (their creation dates are unknown)", batch[0], err)
				break
			}
			for _, img := range page.Images {
				info := imageInfo{name: aws.ToString(img.Name)}
				if t, err := time.Parse(time.RFC3339, aws.ToString(img.CreationDate)); err == nil {
					t = t.UTC()
					info.created = &t
				}
				w.images[aws.ToString(img.ImageId)] = info
			}
		}
	}
}

// historyRead is the history of one parameter: the AMI each version named, oldest version first.
type historyRead struct {
	versions []historyVersion
	err      error
}

type historyVersion struct {
	version  int64
	imageID  string
	modified time.Time
}

// parameterHistory reads a parameter's versions with GetParameterHistory (50 per call), once per audit.
// Versions whose value names no AMI are left out.
func (w *run) parameterHistory(ctx context.Context, name string) historyRead {
	if w.history == nil {
		w.history = map[string]historyRead{}
	}
	if h, ok := w.history[name]; ok {
		return h
	}
	var h historyRead
	p := ssm.NewGetParameterHistoryPaginator(w.SSM, &ssm.GetParameterHistoryInput{Name: aws.String(name), MaxResults: aws.Int32(maxHistoryPerPage)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			h = historyRead{err: fmt.Errorf("reading the history of parameter %s: %w", name, err)}
			break
		}
		for _, v := range page.Parameters {
			id, _, err := providers.ParseParameterValue(aws.ToString(v.Value))
			if err != nil {
				continue
			}
			h.versions = append(h.versions, historyVersion{version: v.Version, imageID: id, modified: aws.ToTime(v.LastModifiedDate)})
		}
	}
	sort.Slice(h.versions, func(i, j int) bool { return h.versions[i].version < h.versions[j].version })
	w.history[name] = h
	return h
}

// releasesAfter counts the releases (versions naming a different AMI than the version before) of a parameter
// after the AMI imageID: after the last version that named it, or when no version did (an AMI from elsewhere,
// or older than the history SSM keeps — its last 100 versions) after its creation date. It returns Unknown
// when neither tells.
func releasesAfter(versions []historyVersion, imageID string, created *time.Time) int {
	from := -1
	for i, v := range versions {
		if v.imageID == imageID {
			from = i
		}
	}
	if from < 0 && created == nil {
		return Unknown
	}
	n := 0
	for i, v := range versions {
		if from >= 0 && i <= from {
			continue
		}
		if from < 0 && !v.modified.After(*created) {
			continue
		}
		if i > 0 && versions[i-1].imageID == v.imageID {
			continue
		}
		n++
	}
	return n
}

// judge compares a group's AMIs in use with its recommended AMI: outdated instances, days and releases
// behind, status.
func (w *run) judge(ctx context.Context, s *subject) {
	g := s.out
	var recCreated *time.Time
	if g.RecommendedImageID != "" {
		recCreated = w.images[g.RecommendedImageID].created
		g.RecommendedReleased = recCreated
	}
	for i := range g.InUse {
		u := &g.InUse[i]
		info := w.images[u.ImageID]
		u.Name, u.Created = info.name, info.created
		if g.RecommendedImageID == "" || u.ImageID == g.RecommendedImageID {
			continue
		}
		// An AMI at least as new as the recommended one (a golden AMI built since) is not outdated.
		u.Outdated = u.Created == nil || recCreated == nil || u.Created.Before(*recCreated)
		if u.Outdated {
			g.OutdatedInstances += u.Instances
		}
	}
	sort.SliceStable(g.InUse, func(i, j int) bool {
		a, b := g.InUse[i].Created, g.InUse[j].Created
		switch {
		case a == nil || b == nil:
			return a == nil && b != nil // unknown dates first: EC2 forgets old AMIs
		case !a.Equal(*b):
			return a.Before(*b)
		}
		return g.InUse[i].ImageID < g.InUse[j].ImageID
	})
	switch {
	case g.RecommendedImageID == "":
		g.Status, g.DaysBehind, g.ReleasesBehind = StatusUnknown, Unknown, Unknown
		return
	case g.Instances == 0:
		g.Status = StatusEmpty
	case g.OutdatedInstances == 0:
		g.Status = StatusCurrent
	default:
		g.Status = StatusBehind
	}
	if g.LaunchImageID != "" && g.LaunchImageID != g.RecommendedImageID && g.AMISource != SourceHardCoded && g.AMISource != SourceLaunchConfiguration &&
		g.AMISource != SourceEKSManaged {
		if created := w.images[g.LaunchImageID].created; created == nil || recCreated == nil || created.Before(*recCreated) {
			g.Notes = append(g.Notes, fmt.Sprintf("new instances still launch %s, not the recommended %s", g.LaunchImageID, g.RecommendedImageID))
		}
	}
	if g.OutdatedInstances == 0 {
		return
	}
	if g.AMISource == SourceSSMResolve && g.LaunchImageID == g.RecommendedImageID {
		g.Notes = append(g.Notes, "new instances get the recommended AMI; running ones keep theirs until replaced (start an instance refresh, or opt the group in to patch-agent)")
	}
	// The oldest outdated AMI: the first in InUse (unknown dates first).
	var oldest *AMIUse
	for i := range g.InUse {
		if g.InUse[i].Outdated {
			oldest = &g.InUse[i]
			break
		}
	}
	g.OldestImageID = oldest.ImageID
	g.DaysBehind = Unknown
	if oldest.Created != nil && recCreated != nil {
		g.behind = max(recCreated.Sub(*oldest.Created), 0)
		g.DaysBehind = int(g.behind / (24 * time.Hour))
	}
	h := w.parameterHistory(ctx, g.RecommendedParameter)
	if h.err != nil {
		g.ReleasesBehind = Unknown
		g.Notes = append(g.Notes, "releases behind unknown: "+h.err.Error())
		return
	}
	g.ReleasesBehind = releasesAfter(h.versions, oldest.ImageID, oldest.Created)
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// formatCount writes n, or "unknown" for Unknown.
func formatCount(n int) string {
	if n == Unknown {
		return "unknown"
	}
	return strconv.Itoa(n)
}
