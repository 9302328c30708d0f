package demo

import (
	"context"
	"fmt"
	"sort"

	awseks "github.com/aws/aws-sdk-go-v2/service/eks"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// fusedEKSNodegroups makes UpdateNodegroupVersion an effect of a Fuse (the one mutating call of a managed node
// group rollout); the reads pass, and are refused once the fuse blew.
type fusedEKSNodegroups struct {
	awsapi.EKSNodegroups
	f *Fuse
}

func (e fusedEKSNodegroups) UpdateNodegroupVersion(ctx context.Context, in *awseks.UpdateNodegroupVersionInput, o ...func(*awseks.Options)) (*awseks.UpdateNodegroupVersionOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	out, err := e.EKSNodegroups.UpdateNodegroupVersion(ctx, in, o...)
	if err = e.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (e fusedEKSNodegroups) DescribeUpdate(ctx context.Context, in *awseks.DescribeUpdateInput, o ...func(*awseks.Options)) (*awseks.DescribeUpdateOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	return e.EKSNodegroups.DescribeUpdate(ctx, in, o...)
}

// repeatedNodegroupUpdates lists the managed node groups of the world that got a second UpdateNodegroupVersion
// to the same version (release or launch template version): a resumed incarnation must send each update of a
// rollout once (the ClientRequestToken recorded before the call makes a repeat the same update).
func repeatedNodegroupUpdates(w *World) []string {
	var out []string
	seen := map[string]int{}
	clusters := map[string]bool{}
	for _, ng := range w.nodegroups {
		clusters[ng.Cluster] = true
	}
	names := make([]string, 0, len(clusters))
	for c := range clusters {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		for _, u := range w.Account.EKSUpdates(c) {
			if u.Nodegroup == "" {
				continue
			}
			key := fmt.Sprintf("%s/%s release %q launch template version %q", c, u.Nodegroup, u.Params["ReleaseVersion"], u.Params["LaunchTemplateVersion"])
			seen[key]++
			if seen[key] == 2 {
				out = append(out, "managed node group "+key+": UpdateNodegroupVersion sent twice (second: "+u.ID+")")
			}
		}
	}
	return out
}
