package orgcmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/config"
)

// auditMaxAttempts is the standard retryer's attempt limit for the audit (the SDK default is 3): a large
// fleet's reads meet throttling, and an audit would rather wait than fail.
const auditMaxAttempts = 10

// ExitBehind is the exit status when a group is behind more than --fail-if-behind: the audit ran and found
// what the flag asks to fail on. It is not 2, the status of a usage error, so that a CI job can tell a
// finding from a mistyped flag.
const ExitBehind = 3

// auditEnv is where the audit command gets its clients: the AWS account of the default credential chain, or
// a simulated account in tests.
type auditEnv struct {
	// connect returns the read-only clients and the CloudWatch client of --publish-metrics for region (""
	// means the configuration's), and the effective region.
	connect func(ctx context.Context, region string) (audit.Clients, awsapi.MetricData, string, error)
	clock   clock.PassiveClock
}

// awsAuditEnv connects to AWS with the default credential chain and the standard retryer at auditMaxAttempts.
var awsAuditEnv = auditEnv{clock: clock.RealClock{}, connect: func(ctx context.Context, region string) (audit.Clients, awsapi.MetricData, string, error) {
	cfg, err := cli.LoadAWSConfig(ctx, cli.ProfileFrom(ctx), region, auditMaxAttempts, cli.RegionRequired("the region whose Auto Scaling groups to audit"))
	if err != nil {
		return audit.Clients{}, nil, "", err
	}
	return audit.Clients{
		AutoScaling: autoscaling.NewFromConfig(cfg),
		EC2:         ec2.NewFromConfig(cfg),
		ECS:         ecs.NewFromConfig(cfg),
		EKS:         eks.NewFromConfig(cfg),
		SSM:         ssm.NewFromConfig(cfg),
	}, cloudwatch.NewFromConfig(cfg), cfg.Region, nil
}}

// ageFlag is a pflag.Value for ages: "30d" or a Go duration (audit.ParseAge).
type ageFlag struct {
	d   time.Duration
	raw string
	set bool
}

func (f *ageFlag) String() string { return f.raw }
func (f *ageFlag) Type() string   { return "age" }
func (f *ageFlag) Set(s string) error {
	d, err := audit.ParseAge(s)
	if err != nil {
		return err
	}
	f.d, f.raw, f.set = d, s, true
	return nil
}

func NewAuditCommand() *cobra.Command { return newAuditCommandWith(awsAuditEnv) }

func newAuditCommandWith(env auditEnv) *cobra.Command {
	var (
		region         = config.Default().Region
		failIfBehind   ageFlag
		publishMetrics bool
		regions        []string
		profile        string
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Report which Auto Scaling groups run hard-coded or outdated AMIs, and by how much (read-only)",
		Long: `Audits every Auto Scaling group of the account and region — opted in to patch-agent or not — and
changes nothing. For each group it reports:

  platform and cluster   ECS (from the cluster's capacity providers, or tag patch-agent/cluster) or EKS
                         (managed node group, tag eks:cluster-name or kubernetes.io/cluster/<name>)
  AMI source             hard-coded (an AMI id in the launch template version), resolve:ssm (the template
                         resolves a parameter at launch), patch-agent (opted in), launch-configuration (must
                         migrate to a launch template), eks-managed (EKS picks the AMI of the node group)
  AMIs in use            from DescribeInstances, with their creation dates (DescribeImages)
  recommended AMI        the group's patch-agent/ami-parameter, else the public ECS-optimized parameter of
                         its own family (ECS: tag patch-agent/ami-family, else the AMI's name — AL2023, AL2,
                         GPU, Neuron, Inferentia, Bottlerocket, Windows) or the EKS-optimized one of the
                         cluster's version (EKS), for the architecture of its instance types
  behind                 days from the oldest outdated AMI's creation to the recommended AMI's, and releases
                         of the recommended parameter since (GetParameterHistory); "unknown" (null in JSON)
                         when a date or the history cannot be read

--fail-if-behind exits with status 3 when a group is behind by more than the age given ("30d", "720h"); status
2 is a usage error only.
--publish-metrics also sends OutdatedInstances and DaysBehind per group to CloudWatch (namespace
PatchAgent/Audit, dimension AutoScalingGroupName): the audit's only write. docs/audit.md lists the columns and
the IAM policy it needs.`,
		Example: `  patch-agent audit --region eu-west-1
  patch-agent audit --output csv > fleet.csv
  patch-agent audit --output json | jq '.groups[] | select(.status == "behind") | {group, daysBehind}'
  patch-agent audit --fail-if-behind 45d --publish-metrics    # in a scheduled job

  # without an AWS account, on a simulated fleet:
  patch-agent demo --scenario audit`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.Var(cli.NewRegionsValue(&region, &regions), "region", "AWS region to audit (env "+config.EnvRegion+"); with --organization or --accounts, repeatable: each region")
	cli.AddProfileFlag(f, &profile)
	orgs := AddOrgFlags(cmd, &profile, &regions, false)
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, []string{cli.FormatTable, cli.FormatWide, cli.FormatJSON, cli.FormatCSV}, nil,
		"wide is the same as table, which cuts nothing")
	f.Var(&failIfBehind, "fail-if-behind", "exit with status 3 when a group's oldest outdated AMI is more than this `age` older than the recommended one (30d, 720h)")
	f.BoolVar(&publishMetrics, "publish-metrics", false, "publish OutdatedInstances and DaysBehind per group to CloudWatch namespace "+audit.MetricsNamespace)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		output := auditFormat(outFlag)
		if orgs.Enabled() {
			return runOrgAudit(cmd, orgs, output, failIfBehind)
		}
		if err := orgs.Check(cmd); err != nil {
			return err
		}
		if err := cli.OneRegion(cmd, regions); err != nil {
			return err
		}
		ctx := cli.WithProfile(cmd.Context(), profile)
		clients, cw, effective, err := env.connect(ctx, region)
		if err != nil {
			return err
		}
		r, err := (&audit.Auditor{Clients: clients, Region: effective, Clock: env.clock}).Run(ctx)
		if err != nil {
			return err
		}
		if err := audit.Write(cmd.OutOrStdout(), output, r); err != nil {
			return err
		}
		if publishMetrics {
			n, err := audit.PublishMetrics(ctx, cw, r)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "published %d metrics to CloudWatch namespace %s\n", n, audit.MetricsNamespace)
		}
		return checkBehind(r, failIfBehind)
	}
	return withIaC(cmd, env)
}

// auditFormat is the format of internal/audit for -o: its table for table and wide (the audit's table cuts
// nothing).
func auditFormat(o *cli.OutputValue) string {
	if o.Is(cli.FormatWide) {
		return audit.FormatTable
	}
	return o.Value
}

// checkBehind returns exit status 3 (ExitBehind) when --fail-if-behind is set and a group is behind by more.
func checkBehind(r *audit.Report, threshold ageFlag) error {
	if !threshold.set {
		return nil
	}
	if behind := r.BehindMoreThan(threshold.d); len(behind) > 0 {
		return cli.ExitError{Code: ExitBehind, Err: fmt.Errorf("%d group(s) behind the recommended AMI by more than %s: %s",
			len(behind), threshold.raw, strings.Join(behind, ", "))}
	}
	return nil
}
