package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/state"
)

func newDemoCommand() *cobra.Command {
	var (
		asJSON    bool
		verbose   bool
		scenario  string
		stateFile string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Roll a simulated ECS cluster and EKS node group to a new AMI with the real agent (no AWS account needed)",
		Long: `Builds a simulated AWS account in memory — an ECS cluster on an Auto Scaling group of 3 instances on
AMI A, a service of 6 tasks, a daemon service, a terminating lifecycle hook to the agent's queue; and an EKS
self-managed node group of 3 nodes (AMI source auto: the EKS-optimized AL2023 AMI of the cluster's version,
arm64 from the instance type) with a Deployment of 6 pods under a PodDisruptionBudget minAvailable 5 and a
DaemonSet, on a simulated Kubernetes API — runs the real agent loop against it on a simulated clock, changes
the golden-AMI parameter and the public EKS parameter to AMI B and sends the Parameter Store Change event and
a scheduled tick. The rollouts are printed live, one line per step, and end with a summary.
The DESIGN.md invariants are checked after every step; the exit status is 1 when any was violated or a
group did not end in the scenario's expected state.

Scenarios:
  rollout  the golden AMI changes; the group is rolled (default)
  crash    the agent is killed after every step transition; a fresh one resumes from the store
  bad-ami  the new AMI never becomes healthy: halt and roll back (ends RolledBack)
  pause    a global pause mid-rollout holds it for 30 minutes; resume finishes it
  soak     a 48h minimum AMI age: the fresh AMI waits (ends Waiting, with the time it may start)
  window   a maintenance window 03:00-04:00 UTC: waits, then rolls inside the window
  audit    no rollout: patch-agent audit of a mixed simulated fleet (--json: the JSON report)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scenario == demo.AuditScenario {
				return runAuditDemo(cmd.Context(), cmd.OutOrStdout(), asJSON)
			}
			opts := demo.Options{Scenario: scenario}
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
			if stateFile != "" {
				if err := saveSnapshot(stateFile, opts.Store); err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "state saved to %s; inspect it with: patch-agent status --state-file %s\n", stateFile, stateFile)
				}
			}
			if asJSON {
				b, err := s.JSON()
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "wall time %s\n", time.Since(began).Round(time.Millisecond))
			}
			for _, g := range s.Groups {
				if g.State != s.Expected {
					return exitError{1, fmt.Errorf("group %s ended %s, not %s: %s", g.Name, g.State, s.Expected, g.Reason)}
				}
			}
			if s.InvariantViolations > 0 {
				return exitError{1, fmt.Errorf("%d invariant violation(s)", s.InvariantViolations)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print only the final summary as JSON")
	cmd.Flags().StringVar(&scenario, "scenario", "rollout", "scenario to play: "+strings.Join(append(demo.Scenarios(), demo.AuditScenario), ", "))
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also write the agent's JSON logs to stderr")
	cmd.Flags().StringVar(&stateFile, "state-file", "", "after the demo, save the agent's state (rollouts, history, locks) to this file for status, history, pause, rollback --state-file")
	return cmd
}
