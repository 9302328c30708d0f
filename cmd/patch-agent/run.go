package main

import (
	"context"
	"encoding/json"
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
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/health"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/notify"
	"github.com/patch-agent/patch-agent/internal/state"
)

func newRunCommand() *cobra.Command {
	cfg := config.Default()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent against a real AWS account",
		Long: `Runs the agent: consumes the SQS queue (lifecycle hooks, Parameter Store Change events, scheduled ticks),
resolves the AMI parameters of the opted-in groups every --poll-interval, and advances every rollout every
--reconcile-interval, persisting each step in the DynamoDB table. Credentials come from the default AWS
credential chain (environment, shared config, ECS task role, instance profile). SIGINT/SIGTERM stop it:
held messages are handed back to the queue at once.

Metrics go to CloudWatch (namespace PatchAgent) every --metrics-interval; /healthz and /readyz (and
/metrics with --prometheus) are served on --health-addr; rollout and lifecycle notifications go to the
EventBridge bus --event-bus (docs/operations.md, docs/notifications.md).`,
		Example: `  patch-agent run --region eu-west-1 \
    --queue-url https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent \
    --table patch-agent`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
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
			sqsAPI, dynamoAPI := sqs.NewFromConfig(awsCfg), dynamodb.NewFromConfig(awsCfg)
			clients := agent.Clients{
				AutoScaling: autoscaling.NewFromConfig(awsCfg),
				EC2:         ec2.NewFromConfig(awsCfg),
				ECS:         ecs.NewFromConfig(awsCfg),
				SSM:         ssm.NewFromConfig(awsCfg),
				SQS:         sqsAPI,
				CloudWatch:  cloudwatch.NewFromConfig(awsCfg),
			}
			store := state.NewDynamoDB(dynamoAPI, cfg.Table)
			obs := newObservability(cfg, log, eventbridge.NewFromConfig(awsCfg), clock.RealClock{})
			eksPlatforms, eksSources := newEKS(awsCfg, ec2.NewFromConfig(awsCfg), clock.RealClock{})
			a := agent.New(clients, agent.Settings{QueueURL: cfg.QueueURL, ReconcileInterval: cfg.ReconcileInterval,
				PollInterval: cfg.PollInterval, VisibilityTimeout: cfg.VisibilityTimeout, Policy: cfg.Policy(), OwnerID: cfg.OwnerID,
				Observer: obs.observer, Platforms: eksPlatforms, Sources: eksSources},
				store, clock.RealClock{}, log)
			checks := map[string]health.Check{"queue": health.QueueCheck(sqsAPI, cfg.QueueURL), "table": health.TableCheck(dynamoAPI, cfg.Table)}
			return obs.run(cmd.Context(), a, clients.CloudWatch, checks)
		},
	}
	cfg.Bind(cmd.Flags())
	return cmd
}

// observability is the agent's metrics registry and notifier, combined into the one Observer it takes.
type observability struct {
	cfg      config.Config
	log      *zap.Logger
	clock    clock.WithTicker
	registry *metrics.Registry
	notifier *notify.Notifier // nil with --notifications=false
	observer lifecycle.Observer
}

func newObservability(cfg config.Config, log *zap.Logger, eb awsapi.EventBridge, clk clock.WithTicker) *observability {
	o := &observability{cfg: cfg, log: log, clock: clk, registry: metrics.NewRegistry(clk)}
	fan := notify.FanOut{Observers: []lifecycle.Observer{o.registry}, Log: log}
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
func (o *observability) run(ctx context.Context, a *agent.Agent, cw awsapi.CloudWatch, checks map[string]health.Check) error {
	var ln net.Listener
	if o.cfg.HealthAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", o.cfg.HealthAddr); err != nil {
			return fmt.Errorf("--health-addr %s: %w", o.cfg.HealthAddr, err)
		}
	}
	o.registry.Consumer = func() *events.Stats { return &a.Consumer.Stats }
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
