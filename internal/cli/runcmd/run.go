package runcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	smithylog "github.com/aws/smithy-go/logging"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/buildinfo"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/health"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/notify"
	"github.com/patch-agent/patch-agent/internal/selfcheck"
	"github.com/patch-agent/patch-agent/internal/state"
)

func NewRunCommand() *cobra.Command {
	cfg := config.Default()
	var check bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent against a real AWS account",
		Long: `Runs the agent: consumes the SQS queue (lifecycle hooks, Parameter Store Change events, scheduled ticks),
resolves the AMI parameters of the opted-in groups every --poll-interval, and advances every rollout every
--reconcile-interval, persisting each step in the DynamoDB table. With --wake-up-events (the default; the
stack's EventBridge rules deliver them) a rollout's waits end on the events that end them (a replacement
launched, a container instance registered or DRAINING, an instance leaving) and on the agent's own timers
(soak, drain and health deadlines, retries); --reconcile-interval (default 2m) is then only the safety poll
that catches a lost event. Credentials come from the default AWS
credential chain (environment, shared config, ECS task role, instance profile). SIGINT/SIGTERM stop it:
held messages are handed back to the queue at once.

Metrics go to CloudWatch (namespace PatchAgent) every --metrics-interval; /healthz and /readyz (and
/metrics with --prometheus) are served on --health-addr; rollout and lifecycle notifications go to the
EventBridge bus --event-bus (docs/operations.md, docs/notifications.md).

Before it acts, run checks that it can work here: region, credentials, the queue (GetQueueAttributes), the
wake-up queue with --wake-up-queue-url (GetQueueAttributes: the stack's wake-up rules target it, and a
consumer of its own receives it beside the queue, so no wake-up delays a lifecycle action), the table (DescribeTable, keys pk/sk) and the read permissions of discovery (DescribeAutoScalingGroups). The first
that fails stops it with that one reason. --check runs only these checks, prints what each found and exits
(0: all passed, 1: the reason). A flag (or its environment variable) missing or invalid, --region among them,
is a usage error: every problem is listed and run exits 2 before any check.`,
		Example: `  patch-agent run --region eu-west-1 \
    --queue-url https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent \
    --table patch-agent`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.ResolveDefaults(cmd.Flags())
			if err := cfg.Validate(); err != nil {
				var ue config.UsageError
				if errors.As(err, &ue) {
					return cli.Usage(cmd, ue) // a flag's value it never takes: that one line, then the hint
				}
				// Every problem names the flag or environment variable to fix: the command line's (or the
				// task definition's) mistake, told apart from a failure of the work (exit status 1).
				return cli.Usage(cmd, fmt.Errorf("invalid configuration:\n%w", err))
			}
			log, err := logging.New(os.Stderr, cfg.LogLevel)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			effective, _ := json.Marshal(cfg)
			log.Info("starting patch-agent", zap.Any(logging.Build, buildinfo.Get()), zap.Any("config", json.RawMessage(effective)))

			awsCfg, err := awsconfig.LoadDefaultConfig(cmd.Context(), awsconfig.WithRegion(cfg.Region),
				awsconfig.WithRetryer(func() aws.Retryer { return retry.NewStandard() }),
				// The SDK's own warnings (IMDS fallbacks, retries) go into the JSON log, not as plain text.
				awsconfig.WithLogger(smithylog.LoggerFunc(func(c smithylog.Classification, format string, v ...any) {
					log.Warn(fmt.Sprintf(format, v...), zap.String("source", "aws-sdk"), zap.String("classification", string(c)))
				})))
			if err != nil {
				return fmt.Errorf("loading AWS credentials and configuration: %w", err)
			}
			// Every client built from awsCfg waits for the client-side rate limit of its service (--rate-limit).
			awsCfg.APIOptions = append(awsCfg.APIOptions, awsapi.NewLimiter(cfg.Limits()).Middleware())
			sqsAPI, dynamoAPI, asAPI := sqs.NewFromConfig(awsCfg), dynamodb.NewFromConfig(awsCfg), autoscaling.NewFromConfig(awsCfg)
			rep := selfcheck.Run(cmd.Context(), selfcheck.Target{Region: cfg.Region, QueueURL: cfg.QueueURL, WakeUpQueueURL: cfg.WakeUpQueueURL, Table: cfg.Table,
				Credentials: awsCfg.Credentials, SQS: sqsAPI, DynamoDB: dynamoAPI, AutoScaling: asAPI})
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n", cli.VersionLine(), checkHeading(cfg))
				rep.Print(cmd.OutOrStdout())
				if rep.Err != nil {
					return cli.ExitError{Code: 1, Err: fmt.Errorf("check failed: %w", rep.Err)}
				}
				fmt.Fprintln(cmd.OutOrStdout(), "every check passed: patch-agent run can start here")
				return nil
			}
			if rep.Err != nil {
				log.Error("start-up check failed", zap.Error(rep.Err))
				return fmt.Errorf("start-up check failed: %w (patch-agent run --check prints every check)", rep.Err)
			}
			found := make([]string, 0, len(rep.Results))
			for _, r := range rep.Results {
				found = append(found, r.Name+": "+r.Found)
			}
			log.Info("start-up check passed", zap.Strings("checks", found))
			clients := agent.Clients{
				AutoScaling: asAPI,
				EC2:         ec2.NewFromConfig(awsCfg),
				ECS:         ecs.NewFromConfig(awsCfg),
				SSM:         ssm.NewFromConfig(awsCfg),
				SQS:         sqsAPI,
				CloudWatch:  cloudwatch.NewFromConfig(awsCfg),
				// EKS managed node groups tagged patch-agent/enabled=true are rollout targets.
				EKSNodegroups: awseks.NewFromConfig(awsCfg),
			}
			store := state.NewDynamoDB(dynamoAPI, cfg.Table)
			if err := store.SetRetention(cfg.HistoryRetention); err != nil {
				return fmt.Errorf("--history-retention: %w", err)
			}
			// Records written before the index kind-index (an earlier version) join it once, before the
			// first tick lists pause locks and rollouts from it (docs/state.md, "Upgrading").
			if n, err := store.Backfill(cmd.Context()); err != nil {
				return fmt.Errorf("indexing records of table %s: %w", cfg.Table, err)
			} else if n > 0 {
				log.Info("indexed records written before the index", zap.Int(logging.Records, n))
			}
			obs := newObservability(cfg, log, eventbridge.NewFromConfig(awsCfg), clock.RealClock{})
			eksPlatforms, eksSources := newEKS(awsCfg, ec2.NewFromConfig(awsCfg), clock.RealClock{})
			a := agent.New(clients, agent.Settings{QueueURL: cfg.QueueURL, WakeUpQueueURL: cfg.WakeUpQueueURL, ReconcileInterval: cfg.ReconcileInterval,
				PollInterval: cfg.PollInterval, VisibilityTimeout: cfg.VisibilityTimeout, Policy: cfg.Policy(), OwnerID: cfg.OwnerID, LeaseTTL: cfg.LeaseTTL,
				Observer: obs.observer, Platforms: eksPlatforms, Sources: eksSources, AllowedAMIOwners: cfg.AMIOwners(), Workers: cfg.Workers,
				HookChecksPerPass: cfg.HookChecksPerPass},
				store, clock.RealClock{}, log)
			checks := map[string]health.Check{"queue": health.QueueCheck(sqsAPI, cfg.QueueURL), "table": health.TableCheck(dynamoAPI, cfg.Table)}
			if cfg.WakeUpQueueURL != "" {
				checks["wake-up queue"] = health.QueueCheck(sqsAPI, cfg.WakeUpQueueURL)
			}
			return obs.run(cmd.Context(), a, clients.CloudWatch, checks)
		},
	}
	cfg.Bind(cmd.Flags())
	cmd.Flags().BoolVar(&check, "check", false, "only check region, credentials, queue, table and read permissions, print what was found and exit (1 with the reason when one fails; 2, before any check, when a flag is missing or invalid)")
	return cmd
}

// observability is the agent's metrics registry and notifier, combined into the one Observer it takes.
type observability struct {
	cfg      config.Config
	log      *zap.Logger
	clock    clock.WithTicker
	registry *metrics.Registry
	notifier *notify.Notifier // nil with --notifications=false
	observer model.Observer
}

func newObservability(cfg config.Config, log *zap.Logger, eb awsapi.EventBridge, clk clock.WithTicker) *observability {
	o := &observability{cfg: cfg, log: log, clock: clk, registry: metrics.NewRegistry(clk)}
	fan := notify.FanOut{Observers: []model.Observer{o.registry}, Log: log}
	if cfg.Notifications {
		o.notifier = notify.New(eb, notify.Options{Bus: cfg.EventBus, Log: log, AgentVersion: buildinfo.Get().Version})
		fan.Observers = append(fan.Observers, o.notifier)
	}
	o.observer = fan
	return o
}

// run serves the health endpoints, publishes metrics and sends notifications while the agent runs. They stop
// after the agent, so its last transitions are still published; a health address that cannot be bound fails
// the start.
// checkHeading is the line of `run --check` above its checks: what they look at, the wake-up queue too when
// --wake-up-queue-url is set (the check reads it as it reads the main queue).
func checkHeading(cfg config.Config) string {
	queues := "queue " + cfg.QueueURL
	if cfg.WakeUpQueueURL != "" {
		queues += ", wake-up queue " + cfg.WakeUpQueueURL
	}
	return fmt.Sprintf("checks of region %s, %s, table %s:", cfg.Region, queues, cfg.Table)
}

func (o *observability) run(ctx context.Context, a *agent.Agent, cw awsapi.CloudWatch, checks map[string]health.Check) error {
	var ln net.Listener
	if o.cfg.HealthAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", o.cfg.HealthAddr); err != nil {
			return fmt.Errorf("--health-addr %s: %w", o.cfg.HealthAddr, err)
		}
	}
	// The message metrics count both queues' consumers (the wake-up queue's with --wake-up-queue-url).
	o.registry.Consumer = func() *events.Stats {
		var stats []*events.Stats
		for _, c := range a.Consumers() {
			stats = append(stats, &c.Stats)
		}
		return events.SumStats(stats...)
	}
	side, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	var wg sync.WaitGroup
	start := func(name string, run func(context.Context) error) {
		wg.Go(func() {
			if err := run(side); err != nil {
				o.log.Error(name+" stopped", zap.Error(err))
			}
		})
	}
	if ln != nil {
		hs := &health.Server{Checks: checks, LastTick: a.LastTick, Interval: o.cfg.ReconcileInterval, Clock: o.clock, Log: o.log}
		if o.cfg.Prometheus {
			hs.Metrics = o.registry.Handler()
		}
		start("health server", func(ctx context.Context) error { return hs.Serve(ctx, ln) })
	}
	if o.cfg.MetricsInterval > 0 {
		pub := &metrics.Publisher{API: cw, Registry: o.registry, Interval: o.cfg.MetricsInterval, Clock: o.clock, Log: o.log}
		start("metrics publisher", pub.Run)
	}
	if o.notifier != nil {
		start("notifier", o.notifier.Run)
	}
	err := a.Run(ctx)
	stop()
	wg.Wait()
	return err
}
