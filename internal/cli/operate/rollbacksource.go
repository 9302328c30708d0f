package operate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// SourceReaders are the two reads of a rollback's source check: the group's tags (DescribeAutoScalingGroups,
// which the operator role already has for `pause --group`) and its AMI parameter (GetParameters).
type SourceReaders struct {
	Groups operator.GroupsAPI
	SSM    awsapi.SSM
}

// NewSourceReaders builds the readers of the source check from the store's AWS configuration; a state file
// has no AWS account behind it (an error: the check is skipped with one line). A test replaces it.
var NewSourceReaders = func(s *cli.OpenedStore) (SourceReaders, error) {
	if s.Groups == nil || s.AWS == nil {
		return SourceReaders{}, errors.New("a state file has no AWS account behind it")
	}
	return SourceReaders{Groups: s.Groups, SSM: ssm.NewFromConfig(*s.AWS)}, nil
}

// sourceCheck is what the group's AMI source names now, against the rollback's plan.
type sourceCheck struct {
	// Parameter is the SSM parameter read; Image the AMI it names.
	Parameter, Image string
	// Superseding is set when Image is neither the AMI rolled back to nor the one rolled back from: the agent
	// rolls the group to Image at its next look (the AMI rolled away from is held back only while the source
	// still names it; docs/operations.md "rollback"), so the rollback will be superseded.
	Superseding bool
}

// checkRollbackSource reads the group's AMI source as the agent would — the group's tag
// patch-agent/ami-parameter (model.TargetFromTags) read with GetParameters (providers.Resolver), or, for
// an EKS `auto` source (whose path needs EKS DescribeCluster, which the operator role lacks), the parameter
// the record says the agent last resolved — and says whether it already names an AMI other than plan.From and
// plan.To. Errors: the group unknown to Auto Scaling or not opted in, the calls, a missing or invalid
// parameter, an `auto` source with no parameter recorded.
func checkRollbackSource(ctx context.Context, rd SourceReaders, plan operator.RollbackPlan) (sourceCheck, error) {
	out, err := rd.Groups.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{plan.Group}})
	if err != nil {
		return sourceCheck{}, fmt.Errorf("describing Auto Scaling group %s: %w", plan.Group, err)
	}
	var target *model.Target
	for _, g := range out.AutoScalingGroups {
		if aws.ToString(g.AutoScalingGroupName) != plan.Group {
			continue
		}
		tags := map[string]string{}
		for _, t := range g.Tags {
			tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
		if target, err = model.TargetFromTags(plan.Group, tags); err != nil {
			return sourceCheck{}, err
		}
		if target == nil {
			return sourceCheck{}, fmt.Errorf("group %s is not opted in (tag %s)", plan.Group, model.TagEnabled)
		}
	}
	if target == nil {
		return sourceCheck{}, fmt.Errorf("Auto Scaling knows no group %s", plan.Group)
	}
	param := target.Parameter
	if param == providers.ParameterAuto {
		if !strings.HasPrefix(plan.Source, "/") {
			return sourceCheck{}, errors.New("its source is `auto` and the record names no parameter the agent resolved it to")
		}
		param = plan.Source
	}
	found, missing, invalid, err := providers.Resolver{SSM: rd.SSM}.Resolve(ctx, []string{param})
	switch {
	case err != nil:
		return sourceCheck{}, err
	case len(missing) > 0:
		return sourceCheck{}, fmt.Errorf("parameter %s does not exist", param)
	case invalid[param] != nil:
		return sourceCheck{}, invalid[param]
	}
	img := found[param].ImageID
	return sourceCheck{Parameter: param, Image: img, Superseding: img != plan.From && img != plan.To}, nil
}
