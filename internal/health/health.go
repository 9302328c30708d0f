// Package health serves the agent's HTTP endpoints: /healthz (the process is alive), /readyz (the queue and
// the state table are reachable and the reconcile loop ticks) and, optionally, /metrics (Prometheus text).
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/logging"
)

// Defaults of Server.
const (
	// DefaultCheckTimeout bounds each readiness check.
	DefaultCheckTimeout = 3 * time.Second
	// StaleTicks is how many reconcile intervals may pass without a tick before the loop counts as stuck.
	StaleTicks = 3
	// shutdownTimeout bounds the graceful shutdown of the server.
	shutdownTimeout = 5 * time.Second
)

// LoopCheckName is the name of the reconcile loop's readiness check in /readyz.
const LoopCheckName = "reconcile"

// Check reports whether one dependency is reachable: nil when it is, else an error saying why not.
type Check func(ctx context.Context) error

// Server holds what the endpoints report. Its zero value serves /healthz and a /readyz that is always ready.
type Server struct {
	// Checks are the readiness checks by name (for example "queue" and "table"); /readyz runs them
	// concurrently, each bounded by CheckTimeout.
	Checks map[string]Check
	// LastTick returns when the reconcile loop last finished an iteration (zero: none yet); nil leaves the
	// loop out of readiness.
	LastTick func() time.Time
	// Interval is the reconcile interval: the loop counts as alive while its last tick is at most StaleTicks
	// intervals old.
	Interval time.Duration
	// Metrics, when set, is served on /metrics.
	Metrics http.Handler
	// CheckTimeout bounds each check; default DefaultCheckTimeout.
	CheckTimeout time.Duration
	// Clock measures the loop's staleness; default the real clock.
	Clock clock.PassiveClock
	// Log receives readiness changes; nil discards them.
	Log *zap.Logger

	mu        sync.Mutex
	lastReady *bool
}

// CheckResult is one check in the /readyz answer.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Readiness is the /readyz answer: 200 when Ready, else 503.
type Readiness struct {
	Ready  bool          `json:"ready"`
	Checks []CheckResult `json:"checks"`
}

// Handler returns the server's routes: GET /healthz, GET /readyz and, with Metrics set, GET /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rd := s.Ready(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if !rd.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rd)
	})
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
	}
	return mux
}

// Ready runs every check and the loop check now.
func (s *Server) Ready(ctx context.Context) Readiness {
	timeout := s.CheckTimeout
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	names := make([]string, 0, len(s.Checks))
	for n := range s.Checks {
		names = append(names, n)
	}
	sort.Strings(names)
	results := make([]CheckResult, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			results[i] = result(name, s.Checks[name](cctx))
		}()
	}
	wg.Wait()
	if s.LastTick != nil {
		results = append(results, result(LoopCheckName, s.loopAlive()))
	}
	rd := Readiness{Ready: true, Checks: results}
	for _, r := range results {
		rd.Ready = rd.Ready && r.OK
	}
	s.logChange(rd)
	return rd
}

func result(name string, err error) CheckResult {
	if err != nil {
		return CheckResult{Name: name, Error: err.Error()}
	}
	return CheckResult{Name: name, OK: true}
}

// loopAlive reports an error when the reconcile loop has not ticked yet or not within StaleTicks intervals.
func (s *Server) loopAlive() error {
	last := s.LastTick()
	if last.IsZero() {
		return errors.New("no reconcile tick finished yet")
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if s.Clock != nil {
		clk = s.Clock
	}
	limit := StaleTicks * s.Interval
	if age := clk.Since(last); s.Interval > 0 && age > limit {
		return fmt.Errorf("last reconcile tick finished %s ago, more than %d intervals (%s)", age.Round(time.Second), StaleTicks, limit)
	}
	return nil
}

// logChange logs when readiness flips (not on every probe).
func (s *Server) logChange(rd Readiness) {
	s.mu.Lock()
	changed := s.lastReady == nil || *s.lastReady != rd.Ready
	s.lastReady = &rd.Ready
	s.mu.Unlock()
	if !changed || s.Log == nil {
		return
	}
	if rd.Ready {
		s.Log.Info("agent ready")
		return
	}
	var why []string
	for _, c := range rd.Checks {
		if !c.OK {
			why = append(why, c.Name+": "+c.Error)
		}
	}
	s.Log.Warn("agent not ready", zap.String(logging.Reason, strings.Join(why, "; ")))
}

// ListenAndServe listens on addr (for example ":8080") and serves until ctx is cancelled; see Serve.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("health server listening on %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves the Handler on ln until ctx is cancelled, then shuts down gracefully: requests in flight get
// up to 5 s to finish. It returns nil after a shutdown on ctx, or the error that stopped the server.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("health server on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		err := srv.Shutdown(shutdown)
		<-errc // http.ErrServerClosed
		if err != nil {
			return fmt.Errorf("shutting down the health server on %s: %w", ln.Addr(), err)
		}
		return nil
	}
}

// QueueAttributesAPI is the SQS call of QueueCheck.
type QueueAttributesAPI interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// QueueCheck reports whether the queue is reachable: GetQueueAttributes (QueueArn) succeeds. Needs
// sqs:GetQueueAttributes on the queue.
func QueueCheck(api QueueAttributesAPI, queueURL string) Check {
	return func(ctx context.Context) error {
		_, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			return fmt.Errorf("queue %s: %w", queueURL, err)
		}
		return nil
	}
}

// DescribeTableAPI is the DynamoDB call of TableCheck.
type DescribeTableAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// TableCheck reports whether the state table is reachable and writable: DescribeTable succeeds and the
// table is ACTIVE or UPDATING. Needs dynamodb:DescribeTable on the table.
func TableCheck(api DescribeTableAPI, table string) Check {
	return func(ctx context.Context) error {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("table %s: %w", table, err)
		}
		if out.Table != nil {
			switch st := out.Table.TableStatus; st {
			case dbtypes.TableStatusActive, dbtypes.TableStatusUpdating, "":
			default:
				return fmt.Errorf("table %s is %s", table, st)
			}
		}
		return nil
	}
}
