package orgcmd

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/org"
)

// runOrgAudit is `audit --organization` / `audit --accounts FILE`: one report of every account and region.
// --fail-if-behind decides the exit status first (2); otherwise an account-region not audited exits 1.
func runOrgAudit(cmd *cobra.Command, o *orgFlags, output string, failIfBehind ageFlag) error {
	if err := o.Check(cmd, "publish-metrics"); err != nil {
		return err
	}
	env := OrgEnvironment
	ctx := cmd.Context()
	targets, conn, err := o.targets(ctx, env)
	if err != nil {
		return err
	}
	rep := org.NewAuditReport(org.Audit(ctx, o.runner(env), conn, targets), env.Clock.Now())
	if err := org.WriteAudit(cmd.OutOrStdout(), output, rep); err != nil {
		return err
	}
	notAudited := failedExit("could not be audited", rep.Failed(), len(rep.Targets), "")
	if failIfBehind.set {
		if behind := rep.BehindMoreThan(failIfBehind.d); len(behind) > 0 {
			msg := fmt.Sprintf("%d group(s) behind the recommended AMI by more than %s: %s", len(behind), failIfBehind.raw, strings.Join(behind, ", "))
			if notAudited != nil {
				msg += "; and " + notAudited.Error()
			}
			return cli.ExitError{Code: ExitBehind, Err: errors.New(msg)}
		}
	}
	return notAudited
}

// AddOnlyFlag registers status's --only.
func AddOnlyFlag(cmd *cobra.Command, only *[]string) {
	cmd.Flags().StringSliceVar(only, "only", nil, "with --organization or --accounts, only the groups that are "+strings.Join(org.StatusFilters(), ", ")+
		" (comma-separated: waiting = a gate holds the rollout, holding = a pause holds the group, halted = halted or rolled back)")
}

// RunOrgStatus is `status --organization` / `status --accounts FILE`: every account's groups, or only those
// waiting, holding or halted (--only).
func RunOrgStatus(cmd *cobra.Command, o *orgFlags, output string, only []string, args []string) error {
	if err := o.Check(cmd, "table", "state-file", "watch"); err != nil {
		return err
	}
	if len(args) > 0 {
		return cli.Usage(cmd, errors.New("a GROUP names one account's group: across accounts, filter with --only or jq on -o json"))
	}
	if !slices.Contains(org.StatusFormats(), output) {
		return cli.Usage(cmd, fmt.Errorf("-o %s is one account's: across accounts use -o %s", output, cli.OrList(org.StatusFormats())))
	}
	for _, f := range only {
		if !slices.Contains(org.StatusFilters(), f) {
			return cli.Usage(cmd, fmt.Errorf("--only %q: want %s", f, strings.Join(org.StatusFilters(), ", ")))
		}
	}
	env := OrgEnvironment
	ctx := cmd.Context()
	targets, conn, err := o.targets(ctx, env)
	if err != nil {
		return err
	}
	doc := org.NewStatusDocument(org.Status(ctx, o.runner(env), conn, targets, o.deployment, only, env.Clock.Now()), only)
	if err := org.WriteStatus(cmd.OutOrStdout(), output, doc); err != nil {
		return err
	}
	return failedExit("could not be read", doc.Failed(), len(doc.Targets), "")
}

// AddChangeOutputFlag registers -o of pause and resume: sentences (table, wide) or one JSON document; across
// accounts a table of one row per account and region.
func AddChangeOutputFlag(cmd *cobra.Command) *cli.OutputValue {
	return cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, nil,
		"table and wide: what was done in sentences, across accounts one row per account and region (wide: the detail in full); json: one document")
}

// runOrgChange is the organization-wide pause or resume: one row per account and region; a partial failure
// exits 1, and the same command run again completes it.
func runOrgChange(cmd *cobra.Command, o *orgFlags, output, action, who, undo string, run func(org.Runner, org.Connector, []org.Target) []org.Result[org.Change]) error {
	if err := o.Check(cmd, "table", "state-file", "queue-url", "group"); err != nil {
		return err
	}
	env := OrgEnvironment
	targets, conn, err := o.targets(cmd.Context(), env)
	if err != nil {
		return err
	}
	doc := org.NewChangeDocument(action, run(o.runner(env), conn, targets))
	doc.Who, doc.Undo = who, undo
	if err := org.WriteChanges(cmd.OutOrStdout(), output, doc); err != nil {
		return err
	}
	err = failedExit("failed", doc.Failed(), len(doc.Targets),
		"; run the same command again: the account-regions already done are left as they are")
	if refused := doc.Refused(); len(refused) > 0 {
		msg := fmt.Sprintf("%d of %d account-regions have a global pause that ends before the one asked for (%s, listed above): "+
			"run the same command with --replace to extend it there", len(refused), len(doc.Targets), refused[0].Outcome)
		if err != nil {
			msg += "; and " + err.Error()
		}
		return errors.New(msg)
	}
	return err
}

// RunOrgPause writes the global pause in every account and region (org.Pause); a pause already in place is
// left as it is unless --replace, and one that ends before the pause asked for fails the command.
func RunOrgPause(cmd *cobra.Command, o *orgFlags, output string, req org.PauseRequest) error {
	ctx := cmd.Context()
	return runOrgChange(cmd, o, output, "pause", req.Who, cli.ResumeHint(cmd, ""), func(r org.Runner, c org.Connector, ts []org.Target) []org.Result[org.Change] {
		return org.Pause(ctx, r, c, ts, o.deployment, req, OrgEnvironment.Clock.Now)
	})
}

// RunOrgResume lifts the global pause in every account and region (org.Resume), as who (--who, like the
// pause).
func RunOrgResume(cmd *cobra.Command, o *orgFlags, output, who string) error {
	ctx := cmd.Context()
	return runOrgChange(cmd, o, output, "resume", who, "", func(r org.Runner, c org.Connector, ts []org.Target) []org.Result[org.Change] {
		return org.Resume(ctx, r, c, ts, o.deployment, who, OrgEnvironment.Clock.Now)
	})
}
