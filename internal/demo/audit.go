package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/audit/iac"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// AuditScenario is the demo scenario of `patch-agent audit` (`patch-agent demo --scenario audit`): no rollout,
// the read-only audit of a mixed simulated fleet.
const AuditScenario = "audit"

// AuditDescription says what the audit demo's fleet holds.
const AuditDescription = "a mixed fleet in us-east-1 on 2026-11-30, six monthly releases of the ECS- and EKS-optimized AL2023 AMIs " +
	"(x86_64 and arm64): ECS groups with a hard-coded AMI (found by their capacity provider), resolve:ssm, patch-agent and a " +
	"launch configuration; EKS managed and self-managed node groups of cluster " + fleet.EKSCluster + " (Kubernetes " +
	fleet.EKSVersion + "); and a group nothing identifies"

// AuditFleet builds the audit demo's account: its groups run AMIs from a year old to current.
func AuditFleet() (*sim.Account, error) {
	a := fleet.New()
	steps := []func() error{
		func() error {
			return fleet.AddHardCodedECS(a, fleet.Group{Name: "orders-ecs", Cluster: "orders", InstanceType: "m6i.large", Image: fleet.ECSx86.Image(2), Instances: 3})
		},
		func() error {
			return fleet.AddHardCodedECS(a, fleet.Group{Name: "orders-ecs-arm", Cluster: "orders", InstanceType: "m7g.large", Image: fleet.ECSarm64.Image(5), Instances: 2})
		},
		func() error {
			if err := fleet.AddResolveSSMECS(a, fleet.Group{Name: "payments-ecs", Cluster: "payments", InstanceType: "c7g.large", Image: fleet.ECSarm64.Image(4), Instances: 2},
				fleet.ECSarm64.ImageIDParameter); err != nil {
				return err
			}
			return a.SetDesiredCapacity("payments-ecs", 3) // the new instance resolves the parameter at launch
		},
		func() error {
			return fleet.AddPatchAgentECS(a, fleet.Group{Name: "search-ecs", Cluster: "search", InstanceType: "m7g.large", Image: fleet.ECSarm64.Image(6), Instances: 3},
				fleet.ECSarm64.Parameter)
		},
		func() error {
			return fleet.AddLaunchConfigurationECS(a, fleet.Group{Name: "legacy-ecs", Cluster: "legacy", InstanceType: "t3.large", Image: fleet.Legacy, Instances: 2})
		},
		func() error {
			_, err := fleet.AddManagedNodegroup(a, fleet.Group{Name: "web", InstanceType: "m7g.large", Instances: 3}, "AL2023_ARM_64_STANDARD", fleet.EKSarm64, 5)
			return err
		},
		func() error {
			return fleet.AddSelfManagedEKS(a, fleet.Group{Name: "batch-eks", InstanceType: "c6i.xlarge", Image: fleet.EKSx86.Image(3), Instances: 2})
		},
		func() error {
			return fleet.AddUntagged(a, fleet.Group{Name: "bastion", InstanceType: "t3.medium", Image: fleet.ECSx86.Image(1), Instances: 1})
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("building the audit demo's fleet: %w", err)
		}
	}
	a.Advance(2 * time.Minute) // payments-ecs' new instance boots
	return a, nil
}

// RunAudit builds the audit demo's fleet and audits it, as `patch-agent audit` audits an account.
func RunAudit(ctx context.Context) (*audit.Report, error) {
	a, err := AuditFleet()
	if err != nil {
		return nil, err
	}
	return fleet.Auditor(a).Run(ctx)
}

// IaCPath is the name the audit demo's code tree is read under (iac.Fixtures).
const IaCPath = "fixtures"

// IaCDescription says what the code the audit demo reads holds.
const IaCDescription = "the code that could build such a fleet: Terraform (variables, tfvars, locals, maps, a local and two remote " +
	"modules, .tf.json), terragrunt, CloudFormation YAML and JSON with a nested stack, and CDK output and context; two files do not parse"

// RunAuditIaC reads the audit demo's code tree with the AMIs of the audit demo's account, as `patch-agent audit
// --iac fixtures/` reads a repository with credentials.
func RunAuditIaC(ctx context.Context) (*iac.Report, error) {
	a, err := AuditFleet()
	if err != nil {
		return nil, err
	}
	return (&iac.Scanner{FS: iac.Fixtures(), EC2: a.ReadOnlyEC2(), Region: a.Options().Region, Clock: a.Clock()}).Scan(ctx, []string{IaCPath})
}
