package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"go.uber.org/zap"
	"k8s.io/utils/clock"
)

// MaxDatumsPerCall is the PutMetricData limit (Amazon CloudWatch API Reference, "PutMetricData": up to 1000
// metrics per request).
const MaxDatumsPerCall = 1000

// DefaultInterval is how often the Publisher sends the metrics by default: CloudWatch's standard resolution.
const DefaultInterval = 60 * time.Second

// flushTimeout bounds the last publish on shutdown.
const flushTimeout = 5 * time.Second

// PutMetricDataAPI is the CloudWatch call the Publisher makes (awsapi.CloudWatch and *cloudwatch.Client have it).
type PutMetricDataAPI interface {
	PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

// Publisher sends a Registry's metrics to CloudWatch every Interval. Datums carry no timestamp: CloudWatch
// stamps them on receipt. A failed call never fails the agent: it is logged and counted (Failures), and the
// counter increases it would have carried are sent with the next successful call.
type Publisher struct {
	API      PutMetricDataAPI
	Registry *Registry
	// Namespace defaults to Namespace ("PatchAgent").
	Namespace string
	// Interval between two publishes; default DefaultInterval (60 s).
	Interval time.Duration
	// Clock drives the interval; default the real clock.
	Clock clock.WithTicker
	// Log receives publish failures; nil discards them.
	Log *zap.Logger
	// OptFns are passed to every PutMetricData call (for example DisableRequestCompression for emulators).
	OptFns []func(*cloudwatch.Options)

	failures atomic.Int64
	mu       sync.Mutex // serialises Publish
	sent     map[string]float64
	last     map[string]float64
}

// Failures returns how many PutMetricData calls failed so far.
func (p *Publisher) Failures() int64 { return p.failures.Load() }

// Snapshot returns the last value published for every series, keyed by SeriesKey: gauges as sent, counters
// as the increase the last successful call carried.
func (p *Publisher) Snapshot() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]float64, len(p.last))
	for k, v := range p.last {
		out[k] = v
	}
	return out
}

// Run publishes every Interval until ctx is cancelled, then publishes once more (bounded by 5 s) so the
// counts of the last period are not lost. It always returns nil: failures are logged and counted.
func (p *Publisher) Run(ctx context.Context) error {
	interval := p.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	var clk clock.WithTicker = clock.RealClock{}
	if p.Clock != nil {
		clk = p.Clock
	}
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			p.publishLogged(flush)
			cancel()
			return nil
		case <-t.C():
			p.publishLogged(ctx)
		}
	}
}

func (p *Publisher) publishLogged(ctx context.Context) {
	if err := p.Publish(ctx); err != nil && p.Log != nil {
		p.Log.Warn("publishing metrics to CloudWatch failed; retrying next interval", zap.Error(err))
	}
}

// Publish sends every series of the registry now, in PutMetricData calls of at most MaxDatumsPerCall datums.
// It returns the joined errors of the calls that failed; the others took effect.
func (p *Publisher) Publish(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sent == nil {
		p.sent, p.last = map[string]float64{}, map[string]float64{}
	}
	ns := p.Namespace
	if ns == "" {
		ns = Namespace
	}
	samples := p.Registry.Collect()
	type entry struct {
		key        string
		value, cum float64
		counter    bool
	}
	entries := make([]entry, 0, len(samples))
	datums := make([]cwtypes.MetricDatum, 0, len(samples))
	for _, s := range samples {
		e := entry{key: s.Key(), value: s.Value}
		if s.Kind == Counter {
			e.counter, e.cum = true, s.Value
			if prev, ok := p.sent[e.key]; ok && s.Value >= prev {
				e.value = s.Value - prev
			} // else: first publish, or the source was reset (a new consumer): everything counted is new
		}
		entries = append(entries, e)
		datums = append(datums, datum(s, e.value))
	}
	var errs []error
	for start := 0; start < len(datums); start += MaxDatumsPerCall {
		end := min(start+MaxDatumsPerCall, len(datums))
		_, err := p.API.PutMetricData(ctx, &cloudwatch.PutMetricDataInput{Namespace: aws.String(ns), MetricData: datums[start:end]}, p.OptFns...)
		if err != nil {
			p.failures.Add(1)
			errs = append(errs, fmt.Errorf("putting metric data %d-%d of %d into %s: %w", start+1, end, len(datums), ns, err))
			continue
		}
		for _, e := range entries[start:end] {
			p.last[e.key] = e.value
			if e.counter {
				p.sent[e.key] = e.cum
			}
		}
	}
	return errors.Join(errs...)
}

// datum converts a sample to a CloudWatch datum with value v (standard resolution, no timestamp).
func datum(s Sample, v float64) cwtypes.MetricDatum {
	d := cwtypes.MetricDatum{MetricName: aws.String(s.Name), Unit: s.Unit, Value: aws.Float64(v)}
	if s.Group != "" {
		d.Dimensions = append(d.Dimensions, cwtypes.Dimension{Name: aws.String(DimensionGroup), Value: aws.String(s.Group)})
		if s.Platform != "" {
			d.Dimensions = append(d.Dimensions, cwtypes.Dimension{Name: aws.String(DimensionPlatform), Value: aws.String(s.Platform)})
		}
	}
	if s.Reason != "" {
		d.Dimensions = append(d.Dimensions, cwtypes.Dimension{Name: aws.String(DimensionReason), Value: aws.String(s.Reason)})
	}
	return d
}
