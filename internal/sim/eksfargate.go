package sim

import (
	"context"
	"fmt"

	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
)

// The Fargate profiles of an EKS cluster, as `patch-agent eks upgrade` reads them (ListFargateProfiles,
// DescribeFargateProfile). Behaviour follows the Amazon EKS API Reference ("ListFargateProfiles": names in
// pages of MaxResults 1-100 with NextToken; "DescribeFargateProfile": the profile's selectors, subnets, pod
// execution role and status, ResourceNotFoundException for an unknown profile) and the Amazon EKS User Guide
// ("Define which Pods use AWS Fargate when launched": a profile selects pods by namespace and labels). The
// pods Fargate runs are Kubernetes nodes of their own (label eks.amazonaws.com/compute-type=fargate); they
// live in the Kubernetes API the tests fake, not here.

// EKSFargateProfileSpec is a Fargate profile of a cluster (AddEKSFargateProfile).
type EKSFargateProfileSpec struct {
	Cluster, Name string
	// Selectors: namespace -> labels (nil: every pod of the namespace).
	Selectors map[string]map[string]string
	// Status defaults to ACTIVE.
	Status ekstypes.FargateProfileStatus
}

// AddEKSFargateProfile creates a Fargate profile on an existing cluster. Errors: the cluster does not exist.
func (s *eksService) AddEKSFargateProfile(spec EKSFargateProfileSpec) error {
	defer s.hold()()
	if s.eksClusters[spec.Cluster] == nil {
		return fmt.Errorf("sim: no EKS cluster %s", spec.Cluster)
	}
	status := spec.Status
	if status == "" {
		status = ekstypes.FargateProfileStatusActive
	}
	p := &ekstypes.FargateProfile{FargateProfileName: ptr(spec.Name), ClusterName: ptr(spec.Cluster), Status: status,
		FargateProfileArn:   ptr(fmt.Sprintf("arn:aws:eks:%s:%s:fargateprofile/%s/%s/%s", s.opts.Region, s.opts.AccountID, spec.Cluster, spec.Name, "f0c1-2d3e")),
		PodExecutionRoleArn: ptr(fmt.Sprintf("arn:aws:iam::%s:role/AmazonEKSFargatePodExecutionRole", s.opts.AccountID)),
		CreatedAt:           ptr(s.now()), Tags: map[string]string{}}
	for _, ns := range sortedKeys(spec.Selectors) {
		p.Selectors = append(p.Selectors, ekstypes.FargateProfileSelector{Namespace: ptr(ns), Labels: spec.Selectors[ns]})
	}
	if s.fargateProfiles[spec.Cluster] == nil {
		s.fargateProfiles[spec.Cluster] = map[string]*ekstypes.FargateProfile{}
	}
	s.fargateProfiles[spec.Cluster][spec.Name] = p
	return nil
}

// ListFargateProfiles lists the names of a cluster's Fargate profiles in name order, paged by MaxResults
// (1-100) and NextToken. Amazon EKS API Reference, "ListFargateProfiles". Errors: ResourceNotFoundException
// (no such cluster), InvalidParameterException.
func (c *EKSClient) ListFargateProfiles(ctx context.Context, in *awseks.ListFargateProfilesInput, _ ...func(*awseks.Options)) (*awseks.ListFargateProfilesOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:ListFargateProfiles")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := deref(in.ClusterName)
	if s.eksClusters[name] == nil {
		return nil, clusterNotFound(name)
	}
	page, next, err := eksListPage(sortedKeys(s.fargateProfiles[name]), in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	return &awseks.ListFargateProfilesOutput{FargateProfileNames: page, NextToken: next}, nil
}

// DescribeFargateProfile describes one Fargate profile: selectors, status, pod execution role. Amazon EKS API
// Reference, "DescribeFargateProfile". Errors: ResourceNotFoundException (no such cluster or profile).
func (c *EKSClient) DescribeFargateProfile(ctx context.Context, in *awseks.DescribeFargateProfileInput, _ ...func(*awseks.Options)) (*awseks.DescribeFargateProfileOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:DescribeFargateProfile")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name, profile := deref(in.ClusterName), deref(in.FargateProfileName)
	if s.eksClusters[name] == nil {
		return nil, clusterNotFound(name)
	}
	p := s.fargateProfiles[name][profile]
	if p == nil {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No Fargate Profile found with name: " + profile + "."), ClusterName: ptr(name),
			FargateProfileName: ptr(profile)}
	}
	cp := *p
	cp.Selectors = append([]ekstypes.FargateProfileSelector{}, p.Selectors...)
	return &awseks.DescribeFargateProfileOutput{FargateProfile: &cp}, nil
}
