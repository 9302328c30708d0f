package iac

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// maxImageIDsPerCall is how many AMI ids go in one DescribeImages image-id filter (the live audit's 100).
const maxImageIDsPerCall = 100

// describe reads the facts of every AMI found with DescribeImages (100 ids a call, deprecated AMIs included)
// and sets each finding's Image and RecommendedParameter; an AMI EC2 does not know gets a note. The first
// failed call ends it with the error: the report is then offline.
func describe(ctx context.Context, api awsapi.ReadOnlyEC2, r *Report, now time.Time) error {
	seen := map[string]bool{}
	var ids []string
	for _, f := range r.Findings {
		if !seen[f.ImageID] {
			seen[f.ImageID] = true
			ids = append(ids, f.ImageID)
		}
	}
	sort.Strings(ids)
	images := map[string]ec2types.Image{}
	for start := 0; start < len(ids); start += maxImageIDsPerCall {
		batch := ids[start:min(start+maxImageIDsPerCall, len(ids))]
		in := &ec2.DescribeImagesInput{Filters: []ec2types.Filter{{Name: aws.String("image-id"), Values: batch}},
			IncludeDeprecated: aws.Bool(true)}
		for {
			out, err := api.DescribeImages(ctx, in)
			if err != nil {
				return fmt.Errorf("describing the AMIs (ec2:DescribeImages): %w", err)
			}
			for _, img := range out.Images {
				images[aws.ToString(img.ImageId)] = img
			}
			if aws.ToString(out.NextToken) == "" {
				break
			}
			in.NextToken = out.NextToken
		}
	}
	for i := range r.Findings {
		f := &r.Findings[i]
		img, ok := images[f.ImageID]
		if !ok {
			f.Note = joinNote(f.Note, "EC2 does not know this AMI in "+orRegion(r.Region)+" (deregistered, private to another account, or of another region)")
			continue
		}
		f.Image = imageFacts(img, now)
		f.RecommendedParameter = audit.ParameterForAMI(f.Image.Name, f.Image.Architecture)
	}
	return nil
}

func imageFacts(img ec2types.Image, now time.Time) *Image {
	out := &Image{Name: aws.ToString(img.Name), Owner: aws.ToString(img.ImageOwnerAlias), Architecture: string(img.Architecture),
		OSFamily: providers.DescribeOSFamily(img)}
	if out.Owner == "" {
		out.Owner = aws.ToString(img.OwnerId)
	}
	if t, err := time.Parse(time.RFC3339, aws.ToString(img.CreationDate)); err == nil {
		t = t.UTC()
		age := int(now.Sub(t) / (24 * time.Hour))
		out.Created, out.AgeDays = &t, &age
	}
	if d, err := time.Parse(time.RFC3339, aws.ToString(img.DeprecationTime)); err == nil && !d.After(now) {
		out.Deprecated = true
	}
	return out
}

func orRegion(r string) string {
	if r == "" {
		return "the region"
	}
	return r
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
