package orgcmd

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/audit/iac"
	"github.com/patch-agent/patch-agent/internal/cli"
)

// exitHardcoded is the exit status of `audit --iac --fail-if-hardcoded` when the code hard-codes an AMI id:
// the same status as --fail-if-behind (ExitBehind), so a CI job treats both audits alike.
const exitHardcoded = ExitBehind

// withIaC adds `--iac PATH...` to the audit command: instead of the account's groups, the Terraform,
// terragrunt, CloudFormation and CDK files under the paths are read for hard-coded AMI ids (internal/audit/iac).
// It wraps the command's argument check and run, so the live audit's flags and code stay as they are.
func withIaC(cmd *cobra.Command, env auditEnv) *cobra.Command {
	var on, offline, failIfHardcoded bool
	f := cmd.Flags()
	f.BoolVar(&on, "iac", false, "read the Terraform, terragrunt, CloudFormation and CDK code under the PATHs given, not the account: report every hard-coded AMI id with its file and line")
	f.BoolVar(&offline, "offline", false, "with --iac: read no AMI facts (name, owner, age, OS family) from EC2")
	f.BoolVar(&failIfHardcoded, "fail-if-hardcoded", false, fmt.Sprintf("with --iac: exit with status %d when the code hard-codes an AMI id", exitHardcoded))
	cmd.Use = "audit [--iac PATH...]"
	cmd.Long += `

--iac PATH... reads code instead of the account: Terraform (.tf, .tf.json, .tfvars, terragrunt.hcl inputs),
CloudFormation templates (YAML and JSON, nested stacks with a local TemplateURL) and CDK output (cdk.out
templates, cdk.context.json). It reports every literal AMI id that reaches a launch template, launch
configuration, instance, Auto Scaling group or EKS node group, with the file and line to change and the way
it gets there (a variable, tfvars value, local, map, module input, mapping, parameter default). Data sources,
resolve:ssm and AWS::SSM::Parameter::Value parameters are listed as current practice. With credentials it adds
each AMI's name, owner, age and OS family (DescribeImages) and the public parameter that keeps it current;
--offline (or no credentials) reports the same findings without them. --fail-if-hardcoded exits with status 3
when there is a finding.`
	cmd.Example += `

  # the code that builds the fleet, in a CI job:
  patch-agent audit --iac infra/ --offline --fail-if-hardcoded
  patch-agent audit --iac live/ modules/ cdk.out/ -o csv > hard-coded-amis.csv`
	args, live := cmd.Args, cmd.RunE
	cmd.Args = func(c *cobra.Command, a []string) error {
		if !on {
			return args(c, a)
		}
		if len(a) == 0 {
			return cli.Usage(c, errors.New("--iac needs at least one PATH: the directories or files of the code to read"))
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, a []string) error {
		if !on {
			if offline || failIfHardcoded {
				return cli.Usage(c, errors.New("--offline and --fail-if-hardcoded go with --iac"))
			}
			return live(c, a)
		}
		for _, name := range []string{"publish-metrics", "fail-if-behind"} {
			if c.Flags().Changed(name) {
				return cli.Usage(c, fmt.Errorf("--%s audits the account's groups: it does not go with --iac", name))
			}
		}
		output := auditFormat(cli.OutputOf(c))
		ctx := c.Context()
		s := iac.Scanner{Clock: env.clock, OfflineReason: "--offline"}
		if !offline {
			region, _ := c.Flags().GetString("region")
			clients, _, effective, err := env.connect(ctx, region)
			if err != nil {
				s.OfflineReason = err.Error()
			} else {
				s.EC2, s.Region, s.OfflineReason = clients.EC2, effective, ""
			}
		}
		r, err := s.Scan(ctx, a)
		if err != nil {
			return err
		}
		if err := iac.Write(c.OutOrStdout(), output, r); err != nil {
			return err
		}
		if r.Offline && !offline {
			fmt.Fprintf(c.ErrOrStderr(), "AMI facts not read (%s): the findings are complete, their AMIs' names and ages are not\n", r.OfflineReason)
		}
		if failIfHardcoded && r.Hardcoded() {
			return cli.ExitError{Code: exitHardcoded, Err: fmt.Errorf("%d hard-coded AMI reference(s) of %d AMI(s) in the code: point it at an SSM parameter (docs/faq.md)",
				r.Summary.Findings, r.Summary.Images)}
		}
		return nil
	}
	return cmd
}
