package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/org"
	"github.com/patch-agent/patch-agent/internal/org/orgsim"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// OrganizationScenario is the demo of the organization-wide commands.
const OrganizationScenario = "organization"

// OrganizationDescription says what the organization demo holds.
const OrganizationDescription = "three member accounts of a simulated AWS Organization in us-east-1: sandbox, whose operator role " +
	"cannot be assumed; payments, an ECS group on a hard-coded AMI; search, an opted-in group mid-rollout. One command each " +
	"audits, pauses and resumes them all"

// The demo's member accounts.
const (
	OrgSandbox  = "111111111111"
	OrgPayments = "222222222222"
	OrgSearch   = "333333333333"
	// OrgRole is the role the demo assumes in each account.
	OrgRole = "patch-agent-operator"
)

// OrganizationWorld builds the organization demo's world: the accounts under ou-demo-workloads, in us-east-1.
func OrganizationWorld() (*orgsim.World, error) {
	w := orgsim.New(2) // two accounts a page: the listing reads two pages
	const region = "us-east-1"
	add := func(id, name string, a *sim.Account, build func(*orgsim.Member) error) error {
		m := w.AddMember(org.Target{Account: org.Account{ID: id, Name: name}, Region: region}, "ou-demo-workloads", a, org.DefaultDeployment)
		return build(m)
	}
	err := add(OrgSandbox, "sandbox", fleet.New(), func(m *orgsim.Member) error {
		w.Org.RefuseAssumeRole(OrgSandbox, "the operator-role StackSet has not reached this account yet")
		return nil
	})
	if err == nil {
		err = add(OrgPayments, "payments", fleet.New(), func(m *orgsim.Member) error {
			return fleet.AddHardCodedECS(m.Account, fleet.Group{Name: "payments-ecs", Cluster: "payments", InstanceType: "m6i.large", Image: fleet.ECSx86.Image(2), Instances: 3})
		})
	}
	if err == nil {
		// search's account runs up to fleet.Start through the first replacement of its rollout, so that the
		// audit (which reads the instances) and status (which reads the rollout record) count the same
		// instances: one of three on the target AMI.
		err = add(OrgSearch, "search", fleet.NewAt(fleet.Start.Add(-orgReplacement)), buildOrgSearch)
	}
	if err != nil {
		return nil, fmt.Errorf("building the organization demo: %w", err)
	}
	return w, nil
}

// orgReplacement is how long before fleet.Start the search group's first instance is replaced: long enough for
// its replacement to be InService and the old instance terminated.
const orgReplacement = 10 * time.Minute

// buildOrgSearch adds the search group, opted in on release 5 of the ECS arm64 line, mid-rollout to release 6:
// its launch template names release 6, its first instance was replaced, and the rollout record says so.
func buildOrgSearch(m *orgsim.Member) error {
	a := m.Account
	g := fleet.Group{Name: "search-ecs", Cluster: "search", InstanceType: "m7g.large", Image: fleet.ECSarm64.Image(5), Instances: 3}
	if err := fleet.AddPatchAgentECS(a, g, fleet.ECSarm64.Parameter); err != nil {
		return err
	}
	target := fleet.ECSarm64.Image(6)
	a.ApplyLaunchTemplate(g.Name, target, "patch-agent")
	if !a.TerminateWithoutDecrement(a.Group(g.Name).Instances[0].ID) {
		return fmt.Errorf("replacing the first instance of %s", g.Name)
	}
	for a.Clock().Now().Before(fleet.Start) { // the agent's part: each launch serves, each drain is done
		if err := fleet.CompleteLifecycleActions(context.Background(), a, g.Name); err != nil {
			return err
		}
		a.Advance(min(15*time.Second, fleet.Start.Sub(a.Clock().Now())))
	}
	onTarget := 0
	instances := a.Group(g.Name).Instances
	for _, inst := range instances {
		if inst.ImageID == target && inst.LifecycleState == "InService" {
			onTarget++
		}
	}
	if len(instances) != int(g.Instances) || onTarget != 1 {
		return fmt.Errorf("%s has %d instances, %d on %s, after its first replacement; want %d, 1", g.Name, len(instances), onTarget, target, g.Instances)
	}
	_, err := m.Store.PutRollout(context.Background(), state.Rollout{Group: g.Name, Platform: "ecs", Cluster: g.Cluster,
		Phase: state.PhaseReplacing, TargetImageID: target, PreviousImageID: g.Image,
		DetectedAt: fleet.Start.Add(-40 * time.Minute), Instances: len(instances), OnTarget: onTarget, UpdatedAt: a.Clock().Now()})
	return err
}

// RunOrganization plays the organization demo on out: the accounts listed from AWS Organizations (two pages),
// then the audit, a global pause, the groups a pause holds, and the resume, each across every account.
func RunOrganization(ctx context.Context, out io.Writer) error {
	w, err := OrganizationWorld()
	if err != nil {
		return err
	}
	writeWrapped(out, "", fmt.Sprintf("scenario %s: %s", OrganizationScenario, OrganizationDescription), "")
	accounts, err := org.ListAccounts(ctx, w.Org, []string{"ou-demo-workloads"})
	if err != nil {
		return err
	}
	targets := org.Targets(accounts, []string{"us-east-1"})
	conn := w.Connector(OrgRole, "")
	r := org.Runner{}
	now := func() time.Time { return fleet.Start }

	step := func(title string) { fmt.Fprintf(out, "\n$ %s\n", title) }
	step("patch-agent audit --organization --ou ou-demo-workloads --region us-east-1")
	if err := org.WriteAudit(out, audit.FormatTable, org.NewAuditReport(org.Audit(ctx, r, conn, targets), fleet.Start)); err != nil {
		return err
	}
	step(`patch-agent pause --organization --ou ou-demo-workloads --region us-east-1 --reason "INC-4711: bad AMI in the factory"`)
	pause := org.PauseRequest{Reason: "INC-4711: bad AMI in the factory", Who: "alice@platform"}
	if err := org.WriteChanges(out, "table", org.NewChangeDocument("pause", org.Pause(ctx, r, conn, targets, org.DefaultDeployment, pause, now))); err != nil {
		return err
	}
	step("patch-agent pause ... (the same command again: already paused accounts are left as they are)")
	if err := org.WriteChanges(out, "table", org.NewChangeDocument("pause", org.Pause(ctx, r, conn, targets, org.DefaultDeployment, pause, now))); err != nil {
		return err
	}
	step("patch-agent status --organization --ou ou-demo-workloads --region us-east-1 --only holding")
	only := []string{org.OnlyHolding}
	if err := org.WriteStatus(out, "table", org.NewStatusDocument(org.Status(ctx, r, conn, targets, org.DefaultDeployment, only, fleet.Start), only)); err != nil {
		return err
	}
	step("patch-agent resume --organization --ou ou-demo-workloads --region us-east-1")
	if err := org.WriteChanges(out, "table", org.NewChangeDocument("resume", org.Resume(ctx, r, conn, targets, org.DefaultDeployment, "alice@platform", now))); err != nil {
		return err
	}
	fmt.Fprintln(out)
	writeWrapped(out, "", "The sandbox account is a row with its error in every step, never the end of the run: deploy the operator role "+
		"there (cloudformation/operator-role.yaml) and run the same commands again.", "")
	return nil
}
