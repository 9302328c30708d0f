package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/logging"
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
held messages are handed back to the queue at once.`,
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
			log.Info("starting patch-agent", zap.Any("config", json.RawMessage(effective)))

			awsCfg, err := awsconfig.LoadDefaultConfig(cmd.Context(), awsconfig.WithRegion(cfg.Region),
				awsconfig.WithRetryer(func() aws.Retryer { return retry.NewStandard() }))
			if err != nil {
				return fmt.Errorf("loading AWS credentials and configuration: %w", err)
			}
			clients := agent.Clients{
				AutoScaling: autoscaling.NewFromConfig(awsCfg),
				EC2:         ec2.NewFromConfig(awsCfg),
				ECS:         ecs.NewFromConfig(awsCfg),
				SSM:         ssm.NewFromConfig(awsCfg),
				SQS:         sqs.NewFromConfig(awsCfg),
				CloudWatch:  cloudwatch.NewFromConfig(awsCfg),
			}
			store := state.NewDynamoDB(dynamodb.NewFromConfig(awsCfg), cfg.Table)
			a := agent.New(clients, agent.Settings{QueueURL: cfg.QueueURL, ReconcileInterval: cfg.ReconcileInterval,
				PollInterval: cfg.PollInterval, VisibilityTimeout: cfg.VisibilityTimeout, Policy: cfg.Policy(), OwnerID: cfg.OwnerID},
				store, clock.RealClock{}, log)
			return a.Run(cmd.Context())
		},
	}
	cfg.Bind(cmd.Flags())
	return cmd
}
