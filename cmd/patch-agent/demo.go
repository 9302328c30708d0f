//go:build !nodemo

// The demo and its simulated account (internal/demo, internal/testworld, internal/sim, client-go's fake
// clientset) are left out of builds with -tags nodemo: make build and make image, the binary that runs in
// production (demo_nodemo.go). `make demo`, `go run ./cmd/patch-agent demo` and the tests keep them.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/iac"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/eksupgrade"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/schema"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

func newDemoCommand() *cobra.Command {
	var (
		asJSON    bool
		verbose   bool
		force     bool
		scenario  string
		stateFile string
		timeline  string
		outFlag   *cli.OutputValue
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Roll a simulated ECS cluster and EKS node group to a new AMI with the real agent (no AWS account needed)",
		Long: `Builds a simulated AWS account in memory — an ECS cluster on an Auto Scaling group of 3 instances on
AMI A, a service of 6 tasks, a daemon service, the agent's launching and terminating lifecycle hooks to its
queue; and an EKS
self-managed node group of 3 nodes (AMI source auto: the EKS-optimized AL2023 AMI of the cluster's version,
arm64 from the instance type) with a Deployment of 6 pods under a PodDisruptionBudget minAvailable 5 and a
DaemonSet, on a simulated Kubernetes API — runs the real agent loop against it on a simulated clock, changes
the golden-AMI parameter and the public EKS parameter to AMI B and sends the Parameter Store Change event and
a scheduled tick. The rollouts are printed live and end with a summary: a group's line each time it changes
(not when only a running time in its reason does), with where its rollout stands in the words of status
(Phase/Step, e.g. Replacing/InstanceRefresh), the instances serving, desired capacity, maximum size and the
instances on the target AMI out of desired capacity, then the instance refresh in flight (its id, status,
percentage complete, instances left to update, and which lifecycle hook holds which instance) and the reason.
A line longer than 120 columns goes on below, indented (a reason on a line of its own).
The invariants of docs/architecture.md are checked after every step; the exit status is 1 when any was violated or a
group did not end in the scenario's expected state.

Scenarios:
  rollout  the golden AMI changes; each group, with both of the agent's hooks, is rolled by one instance refresh (default)
  crash    the agent is killed after every step transition; a fresh one resumes from the store
  bad-ami  the new AMI never serves: the launch is abandoned, the refresh halts and rolls back (ends RolledBack)
  pause    a global pause mid-rollout cancels the refresh for 30 minutes; resume starts a new one that finishes it
  soak     a 48h minimum AMI age: the fresh AMI waits (ends Waiting, with the time it may start)
  refused-ami  the new AMI belongs to an account outside the allow-list: the AMI gate refuses it, nothing is touched (ends Waiting)
  window   a maintenance window 03:00-04:00 UTC: waits, then rolls inside the window
  approval    the groups need a manual approval: the AMI waits until the operator's patch-agent approve, 20 min later
  alarm-gate  a CloudWatch alarm named in patch-agent/alarms is in ALARM: the rollout waits until it returns to OK
  ecs-capacity-provider  an ECS capacity-provider group (managed scaling), 3 instances in 3 AZs with room to spare:
           one instance refresh; ECS keeps the size, AZ rebalancing the spread: 3 instances in 3 AZs (docs/ecs.md)
  refresh  the groups are tagged patch-agent/strategy=refresh: one EC2 Auto Scaling instance refresh per group replaces
           them, launch before terminate; the agent holds each new instance until it serves and drains each old one
  audit    no rollout: patch-agent audit of a mixed simulated fleet (-o json: the JSON report; keeps no state)
  eks-upgrade  no rollout: patch-agent eks upgrade of a simulated EKS cluster from 1.30 to 1.31 (-o json: the summary)
  managed-node-group  an EKS managed node group follows a new AMI release: one UpdateNodegroupVersion, EKS
           replaces the nodes, the agent never touches its Auto Scaling group (ends Completed; -o json: the summary)
  organization  no rollout: audit, pause and resume across three member accounts of a simulated AWS Organization,
           one of whose operator role cannot be assumed

-o table (or wide, the same) prints the rollouts live and a summary; -o json prints only the summary, as one
JSON document that starts with schemaVersion. Each of its groups has status's keys group, phase and step,
with the values patch-agent status -o json shows; the older keys name, state (the same values as group and
phase) and steps (the transitions written) are kept for compatibility.

--timeline FILE.svg draws the rollout: per group over simulated time, the desired capacity, the instances in
service and healthy, those on the target AMI, those draining, and the spans a gate (pause, approval, soak,
window, alarm, AMI gate) held it — capacity that never dipped can be seen at a glance. The picture is SVG,
so FILE must end in .svg; the scenarios without a rollout of the agent (` + strings.Join(undrawnScenarios, ", ") + `)
draw nothing, and --timeline with them is a usage error.

--state-file FILE replaces FILE only when it is a patch-agent state snapshot (or empty) unless --force; its
directory must be writable, which is checked before the demo runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkScenario(scenario); err != nil {
				return cli.Usage(cmd, err)
			}
			if err := checkTimeline(timeline, scenario); err != nil {
				return cli.Usage(cmd, err)
			}
			asJSON = asJSON || outFlag.Is(cli.FormatJSON)
			if scenario == demo.AuditScenario && stateFile != "" {
				return cli.Usage(cmd, errors.New("the audit scenario keeps no state: drop --state-file (it reads the simulated fleet and changes nothing)"))
			}
			if stateFile != "" {
				if err := checkStateFileTarget(stateFile, force); err != nil {
					return err
				}
			}
			if scenario == demo.OrganizationScenario {
				if stateFile != "" || asJSON {
					return cli.Usage(cmd, errors.New("the organization scenario prints its commands' tables: drop --state-file and -o json"))
				}
				return demo.RunOrganization(cmd.Context(), cmd.OutOrStdout())
			}
			if scenario == demo.AuditScenario {
				return runAuditDemo(cmd.Context(), cmd.OutOrStdout(), asJSON)
			}
			if scenario == demo.ManagedNodegroupScenario {
				return runManagedNodegroupDemo(cmd.Context(), cmd.OutOrStdout(), asJSON, stateFile)
			}
			if scenario == demo.EKSUpgradeScenario {
				return runEKSUpgradeDemo(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), asJSON, stateFile)
			}
			opts := demo.Options{Scenario: scenario, Timeline: timeline != ""}
			if !asJSON {
				opts.Out = cmd.OutOrStdout()
			}
			if verbose {
				log, err := logging.New(os.Stderr, "debug")
				if err != nil {
					return err
				}
				opts.Log = log
			} else {
				opts.Log = zap.NewNop()
			}
			if stateFile != "" {
				opts.Store = state.NewMemory()
			}
			began := time.Now()
			s, err := demo.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if timeline != "" {
				if err := writeTimeline(timeline, s); err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "timeline drawn to %s\n", timeline)
				}
			}
			if stateFile != "" {
				if err := cli.SaveSnapshot(stateFile, opts.Store); err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "state saved to %s; inspect it with: %s status --state-file %s\n", stateFile, selfCommand(os.Args[0]), cli.ShellQuote(stateFile))
				}
			}
			if asJSON {
				b, err := s.JSON()
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
			} else {
				// On stderr: stdout is the same from run to run (held by a golden test).
				fmt.Fprintf(cmd.ErrOrStderr(), "wall time %s\n", time.Since(began).Round(time.Millisecond))
			}
			for _, g := range s.Groups {
				if g.State != s.Expected {
					return cli.ExitError{Code: 1, Err: fmt.Errorf("group %s ended %s, not %s: %s", g.Name, g.State, s.Expected, g.Reason)}
				}
			}
			if s.InvariantViolations > 0 {
				return cli.ExitError{Code: 1, Err: fmt.Errorf("%d invariant violation(s)", s.InvariantViolations)}
			}
			return nil
		},
	}
	outFlag = cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, nil, "table and wide: the rollouts live and a summary; json: only the summary")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print only the final summary as JSON")
	cli.DeprecateFlag(cmd.Flags(), "json", "-o json")
	cmd.Flags().StringVar(&scenario, "scenario", "rollout", "scenario to play: "+strings.Join(demoScenarios(), ", "))
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also write the agent's JSON logs to stderr")
	cmd.Flags().StringVar(&stateFile, "state-file", "", "after the demo, save the agent's state (rollouts, history, locks) to this file for status, history, pause, rollback --state-file")
	cmd.Flags().BoolVar(&force, "force", false, "let --state-file replace a file that is not a patch-agent state snapshot")
	cmd.Flags().StringVar(&timeline, "timeline", "", "draw the rollout as an SVG picture to `FILE.svg`: per group over simulated time, desired capacity, instances in service and healthy, on the target AMI, draining, and the gates that held it")
	return cmd
}

// undrawnScenarios are the scenarios that run no rollout of the agent on the simulated clock, so that
// --timeline has nothing to draw.
var undrawnScenarios = []string{demo.AuditScenario, demo.EKSUpgradeScenario, demo.ManagedNodegroupScenario, demo.OrganizationScenario}

// checkTimeline refuses a --timeline the demo cannot draw: a scenario of undrawnScenarios, or a file whose
// name does not end in .svg (the picture is SVG: a viewer trusts the extension).
func checkTimeline(path, scenario string) error {
	switch {
	case path == "":
		return nil
	case slices.Contains(undrawnScenarios, scenario):
		return fmt.Errorf("the %s scenario runs no rollout and draws no timeline: drop --timeline, or play a rollout scenario", scenario)
	case !strings.EqualFold(filepath.Ext(path), ".svg"):
		return fmt.Errorf("--timeline %s: the timeline is an SVG picture, name the file with .svg (e.g. --timeline %s.svg)", path, strings.TrimSuffix(path, filepath.Ext(path)))
	}
	return nil
}

// writeTimeline draws the demo's timeline (demo.WriteTimelineSVG) to path, replacing it.
func writeTimeline(path string, s testworld.Summary) error {
	var b strings.Builder
	if err := demo.WriteTimelineSVG(&b, s); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing the timeline: %w", err)
	}
	return nil
}

// demoScenarios lists every scenario demo plays: internal/demo's and those the command runs itself.
func demoScenarios() []string {
	names := demo.Scenarios()
	if !slices.Contains(names, demo.AuditScenario) {
		names = append(names, demo.AuditScenario)
	}
	if !slices.Contains(names, demo.EKSUpgradeScenario) {
		names = append(names, demo.EKSUpgradeScenario)
	}
	if !slices.Contains(names, demo.ManagedNodegroupScenario) {
		names = append(names, demo.ManagedNodegroupScenario)
	}
	if !slices.Contains(names, demo.OrganizationScenario) {
		names = append(names, demo.OrganizationScenario)
	}
	return names
}

// runManagedNodegroupDemo is `patch-agent demo --scenario managed-node-group`: its progress lines (or only the
// summary as JSON, schemaVersion first). The exit status is 1 when the rollout did not end Completed.
func runManagedNodegroupDemo(ctx context.Context, out io.Writer, asJSON bool, stateFile string) error {
	store := state.NewMemory()
	progress := out
	if asJSON {
		progress = nil
	}
	s, err := demo.RunManagedNodegroup(ctx, progress, store)
	if err != nil {
		return err
	}
	if stateFile != "" {
		if err := cli.SaveSnapshot(stateFile, store); err != nil {
			return err
		}
	}
	if asJSON {
		doc := struct {
			SchemaVersion int `json:"schemaVersion"`
			demo.ManagedNodegroupSummary
		}{schema.Version, s}
		if err := cli.WritePlainJSON(out, doc); err != nil {
			return err
		}
	}
	if s.Phase != string(state.PhaseCompleted) {
		return fmt.Errorf("the managed node group rollout ended %s: %s", s.Phase, s.Reason)
	}
	return nil
}

// checkScenario refuses an unknown --scenario before anything runs, naming every known one.
func checkScenario(name string) error {
	if name == "" || slices.Contains(demoScenarios(), name) { // "" plays the default, like internal/demo
		return nil
	}
	return fmt.Errorf("unknown scenario %q: want one of %s", name, strings.Join(demoScenarios(), ", "))
}

// checkStateFileTarget makes sure the demo can save its state to path before it runs: path is not a
// directory or another non-regular file; an existing file is a patch-agent state snapshot (its format field)
// or empty, unless force; and the directory accepts a new file (SaveSnapshot writes a temporary file there
// and renames it over path).
func checkStateFileTarget(path string, force bool) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("--state-file %s is a directory: name a file, e.g. --state-file %s", path, filepath.Join(path, "demo.json"))
	case err == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("--state-file %s is not a regular file (%s): name a file to write", path, fi.Mode().Type())
	case err == nil && fi.Size() > 0 && !force && !isSnapshotFile(path):
		return fmt.Errorf("--state-file %s exists and is not a patch-agent state snapshot: refusing to overwrite it; "+
			"name another file, or pass --force to replace it", path)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--state-file %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	probe, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--state-file %s: directory %s does not exist", path, dir)
	}
	if err != nil {
		return fmt.Errorf("--state-file %s: cannot write in directory %s: %w", path, dir, err)
	}
	name := probe.Name()
	_ = probe.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("--state-file %s: cannot remove a file from directory %s: %w", path, dir, err)
	}
	return nil
}

// isSnapshotFile reports whether path holds a JSON document whose format field is state.SnapshotFormat.
// Only that field is read; whether the rest loads is LoadMemory's business.
func isSnapshotFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head struct {
		Format string `json:"format"`
	}
	return json.NewDecoder(f).Decode(&head) == nil && head.Format == state.SnapshotFormat
}

// runAuditDemo is `patch-agent demo --scenario audit`: the audit of a simulated mixed fleet, as a table (with
// what the fleet holds) followed by `audit --iac` of a code tree that could build it, or as the live audit's
// JSON report.
func runAuditDemo(ctx context.Context, out io.Writer, asJSON bool) error {
	r, err := demo.RunAudit(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return audit.Write(out, audit.FormatJSON, r)
	}
	fmt.Fprintf(out, "scenario %s: %s\n\n", demo.AuditScenario, demo.AuditDescription)
	if err := audit.Write(out, audit.FormatTable, r); err != nil {
		return err
	}
	ir, err := demo.RunAuditIaC(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n$ patch-agent audit --iac %s/\n%s\n\n", demo.IaCPath, demo.IaCDescription)
	return iac.Write(out, audit.FormatTable, ir)
}

// runEKSUpgradeDemo is `patch-agent demo --scenario eks-upgrade`: the upgrade of a simulated cluster from
// 1.30 to 1.31 with the real workflow, its progress lines and the final summary (or only the summary as JSON).
// The exit status is 1 when a step did not end Completed.
func runEKSUpgradeDemo(ctx context.Context, out, errOut io.Writer, asJSON bool, stateFile string) error {
	store := state.NewMemory()
	progress := out
	if asJSON {
		progress = nil
	}
	began := time.Now()
	s, err := demo.RunEKSUpgrade(ctx, progress, store)
	if err != nil {
		return err
	}
	if stateFile != "" {
		if err := cli.SaveSnapshot(stateFile, store); err != nil {
			return err
		}
	}
	if asJSON {
		// The same document shape as every other machine-readable output: schemaVersion first.
		doc := struct {
			SchemaVersion int `json:"schemaVersion"`
			demo.EKSUpgradeSummary
		}{schema.Version, s}
		if err := cli.WritePlainJSON(out, doc); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(out)
		eksupgrade.Render(out, s.Summary, false)
		fmt.Fprintf(out, "\n%d EKS update(s), %d history entries, simulated time %s\n", s.Updates, s.HistoryEntries,
			time.Duration(s.SimulatedSeconds*float64(time.Second)))
		fmt.Fprintf(errOut, "wall time %s\n", time.Since(began).Round(time.Millisecond)) // stderr: stdout stays deterministic
		if stateFile != "" {
			fmt.Fprintf(out, "state saved to %s; inspect it with: %s eks upgrade status --cluster %s --state-file %s\n", stateFile, selfCommand(os.Args[0]), s.Cluster, cli.ShellQuote(stateFile))
		}
	}
	if s.Phase != state.WorkflowCompleted {
		return cli.ExitError{Code: 1, Err: fmt.Errorf("the upgrade of %s ended %s, not Completed: %s", s.Cluster, s.Phase, s.Reason)}
	}
	for _, st := range s.Steps {
		if st.Status != state.StepStatusCompleted {
			return cli.ExitError{Code: 1, Err: fmt.Errorf("step %s %s ended %s, not Completed", st.Kind, st.Name, st.Status)}
		}
	}
	return nil
}

// selfCommand is how a user runs this program again, for the commands the demo suggests: "go run
// ./cmd/patch-agent" when arg0 is a binary `go run` built in its temporary work directory (…/go-build…/exe/…),
// since that one is gone when the demo ends; "patch-agent" otherwise.
func selfCommand(arg0 string) string {
	if strings.Contains(arg0, "go-build") && filepath.Base(filepath.Dir(arg0)) == "exe" {
		return "go run ./cmd/patch-agent"
	}
	return "patch-agent"
}
