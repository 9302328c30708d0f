package operate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/eksupgrade"
	"github.com/patch-agent/patch-agent/internal/schema"
	"github.com/patch-agent/patch-agent/internal/state"
)

// ExitWaiting is the exit status of `patch-agent eks upgrade` when the workflow waits for an approval or a
// pause to be lifted.
const ExitWaiting = 3

// EKSUpgradeEnv is where `patch-agent eks upgrade` gets its clients and its time: the AWS account of the
// default credential chain, or a simulated account in tests.
type EKSUpgradeEnv struct {
	// Connect returns the EKS and Auto Scaling clients of region ("" means the configuration's).
	Connect func(ctx context.Context, region string) (awsapi.EKSUpgrade, awsapi.GroupReader, error)
	Clock   clock.PassiveClock
	// Wait blocks between two polls of an update; nil waits on a timer.
	Wait func(ctx context.Context, d time.Duration) error
	// Backoff is the poll backoff; nil is eksupgrade.DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// kube returns the Kubernetes client of the cluster (endpoint and certificate authority from
	// DescribeCluster, a bearer token from the operator's credentials); nil: no Kubernetes access.
	kube func(ctx context.Context, region, cluster string) (kubernetes.Interface, error)
}

// awsEKSUpgradeEnv connects to AWS with the default credential chain and the SDK's standard retryer.
var awsEKSUpgradeEnv = EKSUpgradeEnv{Clock: clock.RealClock{}, Connect: func(ctx context.Context, region string) (awsapi.EKSUpgrade, awsapi.GroupReader, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region),
		awsconfig.WithRetryer(func() aws.Retryer { return retry.NewStandard() }))
	if err != nil {
		return nil, nil, fmt.Errorf("loading AWS credentials and configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, nil, cli.RegionRequired("the region of the EKS cluster")
	}
	return awseks.NewFromConfig(cfg), autoscaling.NewFromConfig(cfg), nil
}, kube: func(ctx context.Context, region, cluster string) (kubernetes.Interface, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("loading AWS credentials and configuration: %w", err)
	}
	clk := clock.RealClock{}
	clusters := &eks.Clusters{API: awseks.NewFromConfig(cfg), Clock: clk}
	p := &eks.ClientProvider{Clusters: clusters, Tokens: &eks.TokenSource{Credentials: cfg.Credentials, Region: cfg.Region, Clock: clk}}
	return p.ClientFor(ctx, cluster)
}}

// EKSUpgradeEnvironment is the environment of `patch-agent eks upgrade`; tests replace it.
var EKSUpgradeEnvironment = awsEKSUpgradeEnv

func NewEKSCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "eks",
		Short: "Amazon EKS operations: upgrade a cluster's Kubernetes version as a resumable workflow",
		Args:  cli.SubcommandArgs,
		RunE:  cli.NeedsSubcommand,
	}
	cmd.AddCommand(newEKSUpgradeCommand())
	return cmd
}

func newEKSUpgradeStatusCommand() *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "status --cluster CLUSTER",
		Short: "Show the stored upgrade workflow of a cluster and its current step (no AWS call but the store)",
		Long: `Prints the upgrade workflow of --cluster as the store keeps it: the target version, the phase, every step
with its status, the preflight checks, who requested and approved it. It calls no EKS API: it reads the
agent's table (or --state-file). -o json prints {"schemaVersion": 1, ...} with the same fields as the
summary of ` + "`patch-agent eks upgrade -o json`" + `.`,
		Example: `  patch-agent eks upgrade status --cluster prod --table patch-agent --region eu-west-1
  patch-agent eks upgrade status --cluster prod -o json | jq -r .phase`,
		Args: cobra.NoArgs,
	}
	stores := cli.AddStoreFlags(cmd)
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, nil, "table and wide: the workflow with its checks")
	cmd.Flags().StringVar(&cluster, "cluster", "", "the EKS cluster whose workflow to show (required)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if strings.TrimSpace(cluster) == "" {
			return cli.Usage(cmd, errors.New("--cluster is required: the EKS cluster whose upgrade workflow to show"))
		}
		return showUpgrade(cmd, stores, cluster, outFlag.Value)
	}
	return cmd
}

// showUpgrade prints the stored workflow of cluster (eksupgrade.Get): a workflow the store does not hold is
// an error naming the command that starts one.
func showUpgrade(cmd *cobra.Command, stores *cli.StoreFlags, cluster, output string) error {
	ctx := cmd.Context()
	_, ws, err := openWorkflows(ctx, stores)
	if err != nil {
		return err
	}
	w, err := eksupgrade.Get(ctx, ws, cluster)
	if err != nil {
		return err
	}
	return printUpgrade(cmd.OutOrStdout(), output, eksupgrade.NewSummary(w, EKSUpgradeEnvironment.Clock.Now()), true)
}

func newEKSUpgradeCommand() *cobra.Command {
	var (
		cluster, to, who                               string
		dryRun, approve, retryStep, showing, twoPerson bool
		restartFargate, updateSelfManaged, kubeAccess  bool
	)
	cmd := &cobra.Command{
		Use:   "upgrade --cluster CLUSTER --to 1.MINOR",
		Short: "Upgrade an EKS cluster by one Kubernetes minor version: preflight, control plane, add-ons, node groups",
		Long: `Upgrades an EKS cluster to the next Kubernetes minor version as a workflow kept in the agent's store
(the DynamoDB table, or --state-file), one step at a time, resumable after a crash:

  1. preflight: the target is exactly one minor version above the control plane; no EKS upgrade insight
     (category UPGRADE_READINESS) for it is in ERROR; every installed add-on has a version for the target;
     every node group (managed: its version; self-managed patch-agent groups: the Kubernetes version of its
     AMI source) stays within the kubelet version skew (3 minor versions since 1.28) once the control plane
     is upgraded; the cluster is ACTIVE with no update in progress.
  2. approval: without --yes the workflow waits (exit status 3) for ` + "`patch-agent approve eks:CLUSTER`" + `
     (or a second run with --yes).
  3. control plane: UpdateClusterVersion, tracked with DescribeUpdate until Successful; Failed halts it.
  4. add-ons, one at a time: UpdateAddon to a version compatible with the target (the default, or the
     installed one when it is compatible and newer: never a downgrade), until ACTIVE.
  5. node groups, handed to the agent's rollouts (the workflow never calls UpdateNodegroupVersion): an
     opted-in managed node group follows the control plane by itself; a self-managed group whose AMI
     source is auto follows it by itself, one pinned with
     patch-agent/kubernetes-version (or naming a versioned parameter) needs the pin moved: the step says so.

Every step is written before the AWS call that depends on it and recorded in the history of eks:CLUSTER
(who, when, from, to, update ids): ` + "`patch-agent history eks:CLUSTER`" + `. Run the same command again after a crash
or an error: it resumes at the stored step and never starts an update twice. A second run while one is
under way is refused by the workflow's lease. A pause (` + "`patch-agent pause`" + `, or --group eks:CLUSTER) holds
every new update call; updates already running are tracked to their end.

Exit status: 0 completed (or --dry-run), 1 halted or failed, 2 usage error, 3 waiting (approval or pause).
` + "`patch-agent eks upgrade status --cluster CLUSTER`" + ` shows where the workflow is.
docs/eks-upgrade.md explains the workflow, the IAM permissions and how to resume.`,
		Example: `  # the plan, without changing anything
  patch-agent eks upgrade --cluster prod --to 1.31 --dry-run --table patch-agent --region eu-west-1

  # run it, approving the plan in the same command
  patch-agent eks upgrade --cluster prod --to 1.31 --yes --table patch-agent --region eu-west-1

  # where it is
  patch-agent eks upgrade status --cluster prod --table patch-agent --region eu-west-1

  # after a failed step was fixed
  patch-agent eks upgrade --cluster prod --to 1.31 --retry --table patch-agent --region eu-west-1`,
		Args: cobra.NoArgs,
	}
	stores := cli.AddStoreFlags(cmd)
	cli.AddWhoFlag(cmd, &who)
	fl := cmd.Flags()
	fl.StringVar(&cluster, "cluster", "", "the EKS cluster to upgrade (required)")
	fl.StringVar(&to, "to", "", "the target Kubernetes version, exactly one minor above the control plane (e.g. 1.31)")
	fl.BoolVar(&dryRun, "dry-run", false, "run the preflight and print the plan; change and write nothing")
	fl.BoolVarP(&approve, "yes", "y", false, "approve the plan without asking (instead of running 'patch-agent approve eks:CLUSTER')")
	fl.BoolVar(&approve, "approve", false, "approve the plan")
	cli.DeprecateFlag(fl, "approve", "--yes")
	fl.BoolVar(&retryStep, "retry", false, "start the failed step of a halted workflow again")
	fl.BoolVar(&twoPerson, "two-person", false, "two-person rule: the plan is approved only by another identity than the requester's "+
		"(with an AWS store both are the STS caller identities, as 'patch-agent approve' records them)")
	fl.BoolVar(&restartFargate, "restart-fargate", false, "after the control plane moved, restart the Deployments and StatefulSets whose pods run on Fargate "+
		"(one at a time, each once its PodDisruptionBudgets allow a disruption), so that they get a kubelet of the new version")
	fl.BoolVar(&updateSelfManaged, "update-self-managed-addons", false, "after the control plane moved, update aws-node, coredns and kube-proxy that are not EKS add-ons "+
		"in place (their image tag, to the version recommended for the target; never downgraded)")
	fl.BoolVar(&kubeAccess, "kubernetes", true, "read the cluster's Kubernetes API (Fargate pods, self-managed add-ons); false: those checks are warnings")
	fl.BoolVar(&showing, "status", false, "show the stored workflow and its current step; no AWS call")
	cli.DeprecateFlag(fl, "status", "the subcommand 'patch-agent eks upgrade status --cluster CLUSTER'")
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, nil, "a final summary, wide with the preflight checks; with json the progress lines go to stderr")
	cmd.AddCommand(newEKSUpgradeStatusCommand())
	leaseTTL := config.Default().LeaseTTL
	fl.DurationVar(&leaseTTL, "lease-ttl", leaseTTL, "how long this run's lease on the workflow lasts without renewal; a crashed run blocks a new one "+
		"for it plus a quarter of it (clock skew margin); at least 10s (env "+config.EnvLeaseTTL+")")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		output := outFlag.Value
		if err := config.ValidateLeaseTTL(leaseTTL); err != nil {
			return err
		}
		if strings.TrimSpace(cluster) == "" {
			return cli.Usage(cmd, errors.New("--cluster is required: the EKS cluster to upgrade"))
		}
		switch {
		case showing && (dryRun || approve || retryStep):
			return cli.Usage(cmd, errors.New("--status only reads the workflow: drop --dry-run, --yes and --retry"))
		case dryRun && (approve || retryStep):
			return cli.Usage(cmd, errors.New("--dry-run changes nothing: drop --yes and --retry"))
		case !showing && strings.TrimSpace(to) == "":
			return cli.Usage(cmd, errors.New("--to is required: the target Kubernetes version, one minor above the control plane (e.g. --to 1.31)"))
		}
		if !showing {
			if _, err := eks.ParseVersion(to); err != nil {
				return cli.Usage(cmd, fmt.Errorf("--to %q is not a Kubernetes version: want 1.MINOR, one minor above the control plane (e.g. --to 1.31)", to))
			}
		}
		if showing {
			return showUpgrade(cmd, stores, cluster, output)
		}
		ctx := cmd.Context()
		s, ws, err := openWorkflows(ctx, stores)
		if err != nil {
			return err
		}
		out, env := cmd.OutOrStdout(), EKSUpgradeEnvironment
		// With an AWS store every run records the STS caller, with or without --two-person: a later run
		// without the flag must not approve, as a local --who, a plan its requester's identity asked for.
		if who, err = actingIdentity(cmd, s, who); err != nil {
			return err
		}
		eksAPI, groups, err := env.Connect(ctx, stores.Region)
		if err != nil {
			return err
		}
		progress := out
		if output == "json" {
			progress = cmd.ErrOrStderr()
		}
		runner := &eksupgrade.Runner{EKS: eksAPI, AutoScaling: groups, Store: ws, Clock: env.Clock, Wait: env.Wait, Backoff: env.Backoff,
			Owner: fmt.Sprintf("%s pid %d", who, os.Getpid()), Who: who, Out: progress, LeaseTTL: leaseTTL}
		if kubeAccess && env.kube != nil {
			if runner.Kube, err = env.kube(ctx, stores.Region, cluster); err != nil {
				return fmt.Errorf("connecting to the Kubernetes API of %s (or run with --kubernetes=false): %w", cluster, err)
			}
		}
		if dryRun {
			return dryRunUpgrade(ctx, out, output, cli.Pasteable(cmd, cli.Command(cmd, "eks", "upgrade", "status"), "patch-agent eks upgrade status --cluster "+cli.ShellQuote(cluster)), runner, ws, eksupgrade.Request{Cluster: cluster, To: to, RestartFargate: restartFargate, UpdateSelfManagedAddons: updateSelfManaged})
		}
		w, err := runner.Run(ctx, eksupgrade.Request{Cluster: cluster, To: to, Approve: approve, Retry: retryStep, TwoPerson: twoPerson,
			RestartFargate: restartFargate, UpdateSelfManagedAddons: updateSelfManaged})
		if err != nil {
			return err
		}
		if output != cli.FormatJSON {
			fmt.Fprintln(out)
		}
		if err := printUpgrade(out, output, eksupgrade.NewSummary(w, env.Clock.Now()), w.Phase == state.WorkflowHalted || output == cli.FormatWide); err != nil {
			return err
		}
		return upgradeExit(w)
	}
	return cmd
}

// workflowStore returns the opened store as the workflow's store; a state file saves itself after every
// write, so that a crashed run resumes from the file.
// openWorkflows opens the store of stores and its EKS upgrade workflows (workflowStore).
func openWorkflows(ctx context.Context, stores *cli.StoreFlags) (*cli.OpenedStore, eksupgrade.Store, error) {
	s, err := stores.Open(ctx)
	if err != nil {
		return nil, nil, err
	}
	ws, err := workflowStore(s)
	return s, ws, err
}

func workflowStore(s *cli.OpenedStore) (eksupgrade.Store, error) {
	ws, ok := s.Store.(eksupgrade.Store)
	if !ok {
		return nil, fmt.Errorf("%s does not keep EKS upgrade workflows", s.Where)
	}
	if s.Mem == nil {
		return ws, nil
	}
	return savingStore{Store: ws, s: s}, nil
}

// savingStore writes the state file after every write of the workflow.
type savingStore struct {
	eksupgrade.Store
	s *cli.OpenedStore
}

func (p savingStore) PutWorkflow(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	out, err := p.Store.PutWorkflow(ctx, w)
	if err == nil {
		err = p.s.Save()
	}
	return out, err
}

func (p savingStore) AppendHistory(ctx context.Context, e state.HistoryEntry) error {
	err := p.Store.AppendHistory(ctx, e)
	if err == nil {
		err = p.s.Save()
	}
	return err
}

// dryRunUpgrade prints the plan of an upgrade; a failed preflight exits 1. show is the command that shows
// the stored workflow, named when one is stored.
func dryRunUpgrade(ctx context.Context, out io.Writer, output, show string, runner *eksupgrade.Runner, ws eksupgrade.Store, req eksupgrade.Request) error {
	cluster, to := req.Cluster, req.To
	plan, err := runner.PlanRequest(ctx, req)
	if err != nil {
		return err
	}
	sum := eksupgrade.NewSummary(plan, runner.Clock.Now())
	sum.DryRun = true
	if err := printUpgrade(out, output, sum, true); err != nil {
		return err
	}
	if cur, err := ws.GetWorkflow(ctx, cluster); err == nil && output != cli.FormatJSON && cur.Phase != state.WorkflowCompleted {
		fmt.Fprintf(out, "\nA workflow to %s is stored for %s: phase %s (see %s); running the command resumes it.\n", cur.To, cluster, cur.Phase, show)
	}
	if plan.Phase == state.WorkflowHalted {
		return cli.ExitError{Code: 1, Err: fmt.Errorf("the preflight of the upgrade of %s to %s failed", cluster, to)}
	}
	return nil
}

// upgradeExit turns the workflow's end into the command's exit status.
func upgradeExit(w state.Workflow) error {
	switch w.Phase {
	case state.WorkflowCompleted:
		return nil
	case state.WorkflowWaiting:
		return cli.ExitError{Code: ExitWaiting, Err: fmt.Errorf("the upgrade of %s to %s waits: %s", w.Cluster, w.To, w.Reason)}
	case state.WorkflowHalted:
		next := "fix the cause and run the command again with --retry"
		if w.Current < len(w.Steps) && w.Steps[w.Current].Kind == eksupgrade.KindPreflight {
			next = "fix the failed checks and run the command again"
		}
		return cli.ExitError{Code: 1, Err: fmt.Errorf("the upgrade of %s to %s halted: %s; %s", w.Cluster, w.To, w.Reason, next)}
	}
	return cli.ExitError{Code: 1, Err: fmt.Errorf("the upgrade of %s to %s stopped in phase %s", w.Cluster, w.To, w.Phase)}
}

// printUpgrade writes a workflow summary as a table (checks included when checks is set or the format is
// wide) or as JSON: the
// summary's fields after schemaVersion (schema.Version), as every JSON document of the CLI starts.
func printUpgrade(out io.Writer, output string, s eksupgrade.Summary, checks bool) error {
	if output == "json" {
		return cli.WritePlainJSON(out, struct {
			SchemaVersion int `json:"schemaVersion"`
			eksupgrade.Summary
		}{schema.Version, s})
	}
	eksupgrade.Render(out, s, checks || output == cli.FormatWide)
	return nil
}

// isEKSUpgrade reports whether an approve argument names an EKS upgrade workflow: eks:CLUSTER.
func isEKSUpgrade(arg string) bool { return strings.HasPrefix(arg, eksupgrade.SubjectPrefix) }

// checkEKSUpgradeSubject refuses an eks: subject that names no cluster; nil for any other argument.
func checkEKSUpgradeSubject(arg string) error {
	if isEKSUpgrade(arg) && strings.TrimSpace(strings.TrimPrefix(arg, eksupgrade.SubjectPrefix)) == "" {
		return fmt.Errorf("%q names no cluster: an EKS upgrade plan is approved as %sCLUSTER (e.g. %sprod)", arg, eksupgrade.SubjectPrefix, eksupgrade.SubjectPrefix)
	}
	return nil
}

// approveEKSUpgrade is `patch-agent approve eks:CLUSTER`: it approves the plan of the cluster's upgrade
// workflow, which goes on at the next `patch-agent eks upgrade`.
// Sentences go to cmd's output; the document of -o json to stdout.
func approveEKSUpgrade(cmd *cobra.Command, stdout io.Writer, s *cli.OpenedStore, subject, who string) error {
	cluster := strings.TrimPrefix(subject, eksupgrade.SubjectPrefix)
	ws, err := workflowStore(s)
	if err != nil {
		return err
	}
	w, err := eksupgrade.Approve(cmd.Context(), ws, cluster, who, EKSUpgradeEnvironment.Clock.Now())
	if err != nil {
		return err
	}
	again := cli.Pasteable(cmd, cli.Command(cmd, "eks", "upgrade"), fmt.Sprintf("patch-agent eks upgrade --cluster %s --to %s", cli.ShellQuote(cluster), cli.ShellQuote(w.To)))
	if o := cli.OutputOf(cmd); o != nil && o.Is(cli.FormatJSON) {
		return cli.WriteJSON(stdout, approvalDocument{SchemaVersion: schema.Version, Subject: subject, Cluster: cluster, To: w.To,
			ApprovedBy: w.ApprovedBy, Phase: string(w.Phase), Next: again})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "the upgrade of %s to %s is approved by %s (phase %s); it goes on when you run again:\n  %s\n",
		cluster, w.To, w.ApprovedBy, w.Phase, again)
	return nil
}
