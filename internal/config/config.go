// Package config holds the agent's settings: flags with environment defaults, validation with clear errors,
// and the effective configuration printed at start-up. Nothing else in the agent reads the environment.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Environment variables that give flag defaults.
const (
	EnvQueueURL = "PATCH_AGENT_QUEUE_URL"
	EnvTable    = "PATCH_AGENT_TABLE"
	EnvRegion   = "AWS_REGION"
	EnvLogLevel = "PATCH_AGENT_LOG_LEVEL"
	// EnvAllowedAMIOwners gives the default of --allowed-ami-owners.
	EnvAllowedAMIOwners = "PATCH_AGENT_ALLOWED_AMI_OWNERS"
	// EnvWakeUpEvents gives the default of --wake-up-events ("true" or "false").
	EnvWakeUpEvents = "PATCH_AGENT_WAKE_UP_EVENTS"
	// EnvWakeUpQueueURL gives the default of --wake-up-queue-url.
	EnvWakeUpQueueURL = "PATCH_AGENT_WAKE_UP_QUEUE_URL"
	// EnvLeaseTTL gives the default of --lease-ttl.
	EnvLeaseTTL = "PATCH_AGENT_LEASE_TTL"
	// EnvHealthTimeout, EnvDrainTimeout and EnvClusterBudget give the defaults of --health-timeout,
	// --drain-timeout and --cluster-budget: the agent stack maps its parameters to them (empty: the default).
	EnvHealthTimeout = "PATCH_AGENT_HEALTH_TIMEOUT"
	EnvDrainTimeout  = "PATCH_AGENT_DRAIN_TIMEOUT"
	EnvClusterBudget = "PATCH_AGENT_CLUSTER_BUDGET"
)

// Config is the effective configuration of `patch-agent run`.
type Config struct {
	QueueURL string `json:"queueUrl"`
	// WakeUpQueueURL is the queue the stack's wake-up rules target (the stack's output WakeUpQueueUrl),
	// received by a consumer of its own beside QueueURL's; "" (stacks without one): wake-ups arrive on
	// QueueURL.
	WakeUpQueueURL string `json:"wakeUpQueueUrl,omitempty"`
	Table          string `json:"table"`
	Region         string `json:"region"`
	// ReconcileInterval is how often every target is looked at (seconds in flags: "15s"): the safety poll.
	// Default SafetyPollInterval (2 minutes) with WakeUpEvents, PollingInterval (15 s) without.
	ReconcileInterval time.Duration `json:"reconcileInterval"`
	// WakeUpEvents says the queue receives the stack's wake-up events (EC2 Auto Scaling launch and terminate
	// results, EC2 instances leaving, ECS container instances DRAINING or registered; docs/events.md): the
	// waits of a rollout end on them, and the reconcile interval is only the safety net. Default true.
	WakeUpEvents bool `json:"wakeUpEvents"`
	// PollInterval is how often every tracked SSM parameter is resolved even without events (AWS public
	// parameters emit no change events into an account).
	PollInterval time.Duration `json:"pollInterval"`
	// VisibilityTimeout is requested on receive and extended while a lifecycle drain runs.
	VisibilityTimeout time.Duration `json:"visibilityTimeout"`
	HealthTimeout     time.Duration `json:"healthTimeout"`
	DrainTimeout      time.Duration `json:"drainTimeout"`
	Rollback          bool          `json:"rollbackOnFailure"`
	LogLevel          string        `json:"logLevel"`
	// OwnerID names this replica in leases and logs; defaults to the host name.
	OwnerID string `json:"ownerId"`
	// LeaseTTL is how long a replica's lease on a target or lifecycle action lasts without renewal (default
	// 2m, at least 10s). Another replica takes over a crashed one's work after the TTL plus a quarter of it,
	// the margin for clock skew between replicas (state.LeaseRule).
	LeaseTTL time.Duration `json:"leaseTtl"`
	// HistoryRetention is how long history entries and completed lifecycle-action records stay in the table
	// before DynamoDB's time to live removes them (default 90 days; 0 keeps them forever; otherwise at least
	// 14 days, state.MinRetention).
	HistoryRetention time.Duration `json:"historyRetention"`
	// MetricsInterval is how often the metrics are sent to CloudWatch (namespace PatchAgent); 0 sends none.
	MetricsInterval time.Duration `json:"metricsInterval"`
	// HealthAddr is where /healthz, /readyz (and /metrics with Prometheus) are served; "" serves nothing.
	HealthAddr string `json:"healthAddr"`
	// Prometheus serves the metrics in the Prometheus text format on HealthAddr's /metrics.
	Prometheus bool `json:"prometheus"`
	// EventBus is the EventBridge bus (name or ARN) notifications go to.
	EventBus string `json:"eventBus"`
	// Notifications sends rollout and lifecycle notifications to EventBus.
	Notifications bool `json:"notifications"`
	// AllowedAMIOwners are AMI owners the AMI gate accepts for every group, besides the agent's own account
	// and, for AWS public parameters, Amazon: 12-digit account ids or owner aliases, separated by commas.
	AllowedAMIOwners string `json:"allowedAmiOwners"`
	// ClusterBudget is how many instances rollouts may drain at once across every managed group of one ECS or
	// EKS cluster (`--cluster-budget`, default 1, at least 1), enforced through the store for every replica.
	ClusterBudget int `json:"clusterBudget"`
	// Workers is how many managed groups one reconcile pass advances at once (`--workers`, default
	// agent.DefaultWorkers = 8, 1 to 64); one group is never advanced twice at once.
	Workers int `json:"workers"`
	// HookChecksPerPass bounds how many managed groups' lifecycle hooks (DescribeLifecycleHooks, the
	// missing-hook check) one reconcile pass reads (`--hook-checks-per-pass`, default
	// agent.DefaultHookChecksPerPass = 25, at least 1); the agent raises it to ceil(groups x reconcile
	// interval / poll interval) so that every group is still checked within about a poll interval.
	HookChecksPerPass int `json:"hookChecksPerPass"`
	// RateLimits override the client-side AWS request rates (`--rate-limit CLASS=RATE[/BURST]`, repeatable;
	// awsapi.DefaultRateLimits, sized below the account limits AWS documents).
	RateLimits []string `json:"rateLimits,omitempty"`
}

// SafetyPollInterval is the default reconcile interval with wake-up events: the waits end on events, so the
// poll only catches a lost one. PollingInterval is the default without them.
const (
	SafetyPollInterval = 2 * time.Minute
	PollingInterval    = 15 * time.Second
)

// ResolveDefaults fills in what depends on other flags once fs is parsed: without wake-up events, a reconcile
// interval not given on the command line is PollingInterval.
func (c *Config) ResolveDefaults(fs *pflag.FlagSet) {
	if !c.WakeUpEvents && !fs.Changed("reconcile-interval") {
		c.ReconcileInterval = PollingInterval
	}
}

// Default returns the defaults, with environment variables applied.
func Default() Config {
	host, _ := os.Hostname()
	p := model.DefaultPolicy()
	return Config{
		QueueURL:          os.Getenv(EnvQueueURL),
		WakeUpQueueURL:    os.Getenv(EnvWakeUpQueueURL),
		Table:             os.Getenv(EnvTable),
		Region:            os.Getenv(EnvRegion),
		ReconcileInterval: SafetyPollInterval,
		WakeUpEvents:      envOr(EnvWakeUpEvents, "true") != "false",
		PollInterval:      10 * time.Minute,
		VisibilityTimeout: 2 * time.Minute,
		HealthTimeout:     envDuration(EnvHealthTimeout, p.HealthTimeout),
		DrainTimeout:      envDuration(EnvDrainTimeout, p.DrainTimeout),
		Rollback:          p.RollbackOnFailure,
		ClusterBudget:     envInt(EnvClusterBudget, p.ClusterBudget),
		Workers:           8,
		HookChecksPerPass: 25,
		LogLevel:          envOr(EnvLogLevel, "info"),
		OwnerID:           host,
		LeaseTTL:          envDuration(EnvLeaseTTL, state.DefaultLeaseTTL),
		HistoryRetention:  state.DefaultRetention,
		MetricsInterval:   60 * time.Second,
		HealthAddr:        ":8080",
		EventBus:          "default",
		Notifications:     true,
		AllowedAMIOwners:  os.Getenv(EnvAllowedAMIOwners),
	}
}

// envDuration returns the duration in environment variable k, def when unset, and 0 when it is no duration
// (Validate then says so).
func envDuration(k string, def time.Duration) time.Duration {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0
	}
	return d
}

// envInt returns the integer in environment variable k, def when unset, and -1 when it is no integer
// (Validate then says so).
func envInt(k string, def int) int {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Bind registers the flags of c on fs.
func (c *Config) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&c.QueueURL, "queue-url", c.QueueURL, "URL of the SQS queue the agent consumes (env "+EnvQueueURL+")")
	fs.StringVar(&c.WakeUpQueueURL, "wake-up-queue-url", c.WakeUpQueueURL, "URL of the SQS queue of wake-up events, received beside --queue-url so that no wake-up delays a lifecycle action; empty: wake-ups arrive on --queue-url (env "+EnvWakeUpQueueURL+")")
	fs.StringVar(&c.Table, "table", c.Table, "DynamoDB table holding rollout state (env "+EnvTable+")")
	fs.StringVar(&c.Region, "region", c.Region, "AWS region (env "+EnvRegion+")")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", c.ReconcileInterval, "how often every managed group is looked at whatever the events: "+
		"the safety poll (a lost wake-up event delays a rollout by at most this); 15s with --wake-up-events=false unless given")
	fs.BoolVar(&c.WakeUpEvents, "wake-up-events", c.WakeUpEvents, "the queue receives the stack's wake-up events (launch and terminate results, "+
		"instances leaving, container instances DRAINING or registered), which end a rollout's waits; false polls every 15s instead (env "+EnvWakeUpEvents+")")
	fs.DurationVar(&c.PollInterval, "poll-interval", c.PollInterval, "how often every AMI parameter is resolved without an event (public /aws/service parameters send none)")
	fs.DurationVar(&c.VisibilityTimeout, "visibility-timeout", c.VisibilityTimeout, "message visibility requested on receive and kept extended while a drain runs")
	fs.DurationVar(&c.HealthTimeout, "health-timeout", c.HealthTimeout, "how long a replacement may take to be healthy before the rollout halts (env "+EnvHealthTimeout+")")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long a drain may take before the rollout halts and the instance is put back in service (env "+EnvDrainTimeout+")")
	fs.IntVar(&c.Workers, "workers", c.Workers, "how many managed groups a reconcile pass advances at once (1 to 64); one group is never advanced twice at once, "+
		"and every AWS call still waits for --rate-limit")
	fs.IntVar(&c.HookChecksPerPass, "hook-checks-per-pass", c.HookChecksPerPass, "at most how many managed groups' lifecycle hooks one reconcile pass reads "+
		"(DescribeLifecycleHooks, the missing-hook check), spreading the reads of a large fleet over passes; raised to ceil(groups x --reconcile-interval / --poll-interval) "+
		"so every group is still checked within about --poll-interval + --reconcile-interval; at least 1")
	fs.StringArrayVar(&c.RateLimits, "rate-limit", c.RateLimits, "client-side AWS request rate CLASS=RATE[/BURST] in requests per second, repeatable, 0 lifts it; "+
		"classes and defaults (about half the account limits AWS documents): ec2-mutating=2.5/100 ec2=10/50 autoscaling=10/20 ecs=10/25 ssm=20/20 eks=10/20 cloudwatch=10/20")
	fs.IntVar(&c.ClusterBudget, "cluster-budget", c.ClusterBudget, "how many instances rollouts may drain at once across every managed group of one ECS or EKS cluster (env "+EnvClusterBudget+")")
	fs.BoolVar(&c.Rollback, "rollback", c.Rollback, "put the launch template back to the last good version when a rollout halts on an unhealthy replacement")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (env "+EnvLogLevel+")")
	fs.StringVar(&c.OwnerID, "owner-id", c.OwnerID, "name of this replica in leases and logs")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "how long a replica's lease on a target or lifecycle action lasts without renewal; "+
		"another replica takes over after it plus a quarter of it (clock skew margin); at least 10s (env "+EnvLeaseTTL+")")
	fs.DurationVar(&c.HistoryRetention, "history-retention", c.HistoryRetention, "how long history entries and completed lifecycle-action records are kept "+
		"before the table's time to live removes them; 0 keeps them forever, otherwise at least 336h (14 days, the longest SQS keeps a message)")
	fs.DurationVar(&c.MetricsInterval, "metrics-interval", c.MetricsInterval, "how often metrics are sent to CloudWatch (namespace PatchAgent); 0 sends none")
	fs.StringVar(&c.HealthAddr, "health-addr", c.HealthAddr, "address of the /healthz and /readyz endpoints (and /metrics with --prometheus); empty serves none")
	fs.BoolVar(&c.Prometheus, "prometheus", c.Prometheus, "serve the metrics in the Prometheus text format on /metrics of --health-addr")
	fs.StringVar(&c.EventBus, "event-bus", c.EventBus, "EventBridge bus (name or ARN) that receives the rollout and lifecycle notifications")
	fs.BoolVar(&c.Notifications, "notifications", c.Notifications, "send rollout and lifecycle notifications to --event-bus")
	fs.StringVar(&c.AllowedAMIOwners, "allowed-ami-owners", c.AllowedAMIOwners, "AMI owners the AMI gate accepts for every group besides this account (and Amazon for /aws/service parameters): account ids or aliases (amazon, aws-marketplace, aws-backup-vault, self), comma-separated (env "+EnvAllowedAMIOwners+")")
}

// UsageError is an error of Validate that is a flag given a value it never takes: the CLI prints that one line
// and the hint alone; the other problems of Validate are listed together under "invalid configuration". Both
// exit 2 (a usage error).
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Validate returns every problem of c at once, each naming the flag and the environment variable to fix.
func (c Config) Validate() error {
	var errs []error
	if c.QueueURL == "" {
		errs = append(errs, fmt.Errorf("--queue-url (or %s) is required: the SQS queue that receives lifecycle hooks and SSM events", EnvQueueURL))
	} else if u, err := url.Parse(c.QueueURL); err != nil || u.Scheme == "" || u.Host == "" || strings.Count(strings.Trim(u.Path, "/"), "/") != 1 {
		errs = append(errs, fmt.Errorf("--queue-url %q is not a queue URL like https://sqs.us-east-1.amazonaws.com/111122223333/patch-agent", c.QueueURL))
	} else if m := queueHostRegion.FindStringSubmatch(u.Host); m != nil && c.Region != "" && m[1] != c.Region {
		errs = append(errs, fmt.Errorf("--queue-url names a queue in %s but --region is %s: the agent runs in the queue's region", m[1], c.Region))
	}
	if c.WakeUpQueueURL != "" {
		if u, err := url.Parse(c.WakeUpQueueURL); err != nil || u.Scheme == "" || u.Host == "" || strings.Count(strings.Trim(u.Path, "/"), "/") != 1 {
			errs = append(errs, fmt.Errorf("--wake-up-queue-url %q is not a queue URL like https://sqs.us-east-1.amazonaws.com/111122223333/patch-agent-wake-up", c.WakeUpQueueURL))
		} else if c.WakeUpQueueURL == c.QueueURL {
			errs = append(errs, fmt.Errorf("--wake-up-queue-url is --queue-url: give the stack's WakeUpQueueUrl output, or leave it empty to receive wake-ups on --queue-url"))
		} else if m := queueHostRegion.FindStringSubmatch(u.Host); m != nil && c.Region != "" && m[1] != c.Region {
			errs = append(errs, fmt.Errorf("--wake-up-queue-url names a queue in %s but --region is %s: the agent runs in the queue's region", m[1], c.Region))
		}
	}
	if c.Table == "" {
		errs = append(errs, fmt.Errorf("--table (or %s) is required: the DynamoDB table that keeps rollout state", EnvTable))
	} else if !tableName.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("--table %q is not a DynamoDB table name (3-255 characters: letters, digits, _ . -)", c.Table))
	}
	if c.Region == "" {
		errs = append(errs, fmt.Errorf("--region (or %s) is required", EnvRegion))
	} else if !regionName.MatchString(c.Region) {
		errs = append(errs, fmt.Errorf("--region %q is not an AWS region name such as eu-west-1", c.Region))
	}
	positive := map[string]time.Duration{"--reconcile-interval": c.ReconcileInterval, "--poll-interval": c.PollInterval,
		"--visibility-timeout": c.VisibilityTimeout, "--health-timeout": c.HealthTimeout, "--drain-timeout": c.DrainTimeout}
	for _, name := range []string{"--reconcile-interval", "--poll-interval", "--visibility-timeout", "--health-timeout", "--drain-timeout"} {
		if positive[name] <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, positive[name]))
		}
	}
	if c.Workers < 1 || c.Workers > 64 {
		errs = append(errs, fmt.Errorf("--workers must be 1 to 64 (groups advanced at once), got %d", c.Workers))
	}
	if c.HookChecksPerPass < 1 {
		errs = append(errs, UsageError{fmt.Sprintf("--hook-checks-per-pass must be at least 1 (groups whose lifecycle hooks one pass reads), got %d", c.HookChecksPerPass)})
	}
	if _, err := awsapi.ParseRateLimits(c.RateLimits); err != nil {
		errs = append(errs, err)
	}
	if c.ClusterBudget < 1 {
		errs = append(errs, fmt.Errorf("--cluster-budget must be at least 1 (instances draining at once per cluster), got %d", c.ClusterBudget))
	}
	if c.VisibilityTimeout > 12*time.Hour {
		errs = append(errs, fmt.Errorf("--visibility-timeout %s is above the SQS maximum of 12h", c.VisibilityTimeout))
	}
	if c.PollInterval > 0 && c.PollInterval < time.Minute {
		errs = append(errs, fmt.Errorf("--poll-interval %s is below 1m: Parameter Store throttles GetParameters", c.PollInterval))
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		name := "--log-level"
		if env := os.Getenv(EnvLogLevel); env != "" && env == c.LogLevel {
			name = EnvLogLevel + " (the default of --log-level)"
		}
		errs = append(errs, fmt.Errorf("%s %q: want debug, info, warn or error", name, c.LogLevel))
	}
	if c.MetricsInterval < 0 || c.MetricsInterval > 0 && c.MetricsInterval < 10*time.Second {
		errs = append(errs, fmt.Errorf("--metrics-interval %s: want 0 (no CloudWatch metrics) or at least 10s", c.MetricsInterval))
	}
	if c.Prometheus && c.HealthAddr == "" {
		errs = append(errs, errors.New("--prometheus needs --health-addr: /metrics is served there"))
	}
	if c.Notifications && c.EventBus == "" {
		errs = append(errs, errors.New("--event-bus is empty: name the bus (\"default\") or turn --notifications off"))
	}
	if c.OwnerID == "" {
		errs = append(errs, errors.New("--owner-id is empty: name this replica (it defaults to the host name)"))
	}
	if _, err := model.ParseAMIOwners(c.AllowedAMIOwners); err != nil {
		errs = append(errs, fmt.Errorf("--allowed-ami-owners (or %s): %w", EnvAllowedAMIOwners, err))
	}
	if err := ValidateLeaseTTL(c.LeaseTTL); err != nil {
		errs = append(errs, err)
	}
	if err := (&state.DynamoDB{}).SetRetention(c.HistoryRetention); err != nil {
		errs = append(errs, fmt.Errorf("--history-retention: %w", err))
	}
	return errors.Join(errs...)
}

// Limits returns the client-side AWS request rates: the defaults with --rate-limit applied (specs Validate
// refuses leave the defaults).
func (c Config) Limits() awsapi.RateLimits {
	l, err := awsapi.ParseRateLimits(c.RateLimits)
	if err != nil {
		return awsapi.DefaultRateLimits()
	}
	return l
}

// AMIOwners returns the owners of --allowed-ami-owners (nil when none; entries Validate refuses are left out).
func (c Config) AMIOwners() []string {
	owners, _ := model.ParseAMIOwners(c.AllowedAMIOwners)
	return owners
}

// ValidateLeaseTTL returns a clear error when d is not a usable lease TTL (`--lease-ttl`): below
// state.MinLeaseTTL (10s), or an unparseable PATCH_AGENT_LEASE_TTL.
func ValidateLeaseTTL(d time.Duration) error {
	if env := os.Getenv(EnvLeaseTTL); env != "" {
		if _, err := time.ParseDuration(env); err != nil {
			return fmt.Errorf("%s %q (the default of --lease-ttl) is not a duration such as 2m", EnvLeaseTTL, env)
		}
	}
	if d < state.MinLeaseTTL {
		return fmt.Errorf("--lease-ttl %s is below %s: the lease's skew margin (a quarter of it) must outlast a tick's DynamoDB writes and the clock skew between replicas",
			d, state.MinLeaseTTL)
	}
	return nil
}

var (
	// queueHostRegion reads the region of a standard SQS endpoint host (sqs.<region>.amazonaws.com).
	queueHostRegion = regexp.MustCompile(`^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)
	// tableName is the DynamoDB table name rule (Amazon DynamoDB Developer Guide: "Supported data types and
	// naming rules").
	tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)
	// regionName matches AWS region names (us-east-1, eu-central-2, us-gov-west-1, ap-southeast-4).
	regionName = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-\d+$`)
)

// MarshalJSON renders the configuration for the start-up log with durations as text ("15s"), not nanoseconds.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config
	out := map[string]any{}
	b, err := json.Marshal(plain(c))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if d, ok := v.Field(i).Interface().(time.Duration); ok {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			out[name] = d.String()
		}
	}
	return json.Marshal(out)
}

// Policy returns the rollout policy the configuration sets.
func (c Config) Policy() model.Policy {
	return model.Policy{HealthTimeout: c.HealthTimeout, DrainTimeout: c.DrainTimeout, RollbackOnFailure: c.Rollback, ClusterBudget: c.ClusterBudget}
}
