package providers_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// countingEC2 counts the AMI gate's reads of images and instance types.
type countingEC2 struct {
	awsapi.EC2
	types  awsapi.EC2InstanceTypes
	images atomic.Int32
	archs  atomic.Int32
}

func (c *countingEC2) DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, opts ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error) {
	c.images.Add(1)
	return c.EC2.DescribeImages(ctx, in, opts...)
}

func (c *countingEC2) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	c.archs.Add(1)
	return c.types.DescribeInstanceTypes(ctx, in, opts...)
}

// The fleet scenario: 1,000 groups moving to one shared AMI all run the gate's fresh check (the one just before
// Preparing) within one pass. Every fact still comes from EC2, but one answer per image id serves the checks of
// the next AMIGate.FreshTTL (10 s) and the 5-minute TTL for waiting checks: 50 groups checked 100 ms apart (5
// s) read the target and the current AMI once each and the instance types once; a fresh check past FreshTTL
// reads the image again, and the checks stay the gate's (an image deregistered meanwhile is refused by that
// read).
func TestAMIGateSharesOneImageReadAcrossTheGroupsOfAPass(t *testing.T) {
	const n = 50
	ctx := context.Background()
	var spec testworld.Spec
	for i := range n {
		spec.Groups = append(spec.Groups, testworld.GroupSetup{Name: fmt.Sprintf("g-%02d", i), Cluster: "c1", Parameter: testworld.Parameter,
			Min: 1, Max: 2, Desired: 1, HeartbeatTimeout: -1})
	}
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	w.RegisterAMI(testworld.ImageB)
	d, err := providers.Discover(ctx, w.Account.AutoScaling())
	require.NoError(t, err)
	clk := w.Account.Clock()
	ec2api := &countingEC2{EC2: w.Account.EC2(), types: w.Account.EC2InstanceTypes()}
	gate := &providers.AMIGate{EC2: ec2api, InstanceTypes: ec2api, AccountID: w.Account.Options().AccountID, Clock: clk}
	check := func(name string) *model.AMIRejection {
		g := d.Groups[name]
		rej, err := gate.Check(ctx, providers.GateRequest{Target: d.Targets[name], Group: g, View: providers.BuildView(g, nil, nil, nil, clk.Now()),
			ImageID: testworld.ImageB, Parameter: testworld.Parameter, Fresh: true})
		require.NoError(t, err)
		return rej
	}
	for _, name := range d.Names() {
		require.Nil(t, check(name), "%s: ImageB passes", name)
		clk.Step(100 * time.Millisecond)
	}
	require.EqualValues(t, 2, ec2api.images.Load(), "DescribeImages: the target and the current AMI once each, not once per group")
	require.EqualValues(t, 1, ec2api.archs.Load(), "DescribeInstanceTypes once")

	w.Account.SetImageState(testworld.ImageB, "deregistered")
	clk.Step(10 * time.Second) // past FreshTTL
	rej := check(d.Names()[0])
	require.NotNil(t, rej, "a fresh check past FreshTTL asks EC2 again and sees the deregistration")
	require.Equal(t, providers.RejectImageNotAvailable, rej.Reason)
	require.EqualValues(t, 3, ec2api.images.Load(), "one more read: the target, refused before the current AMI is read")
}
