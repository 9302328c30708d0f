package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// Limits of the APIs the agent publishes to (Amazon CloudWatch API Reference, "PutMetricData": up to 1000
// metrics per call, 30 dimensions per metric; Amazon EventBridge API Reference, "PutEvents": 1 to 10 entries,
// 256 KB per request).
const (
	maxMetricDatumsPerCall  = 1000
	maxDimensionsPerDatum   = 30
	maxEventEntriesPerCall  = 10
	maxEventsRequestPayload = 256 * 1024
)

// PublishedMetric is one datum the agent sent with PutMetricData, as received.
type PublishedMetric struct {
	Namespace  string
	Name       string
	Dimensions map[string]string
	Value      float64
	Unit       cwtypes.StandardUnit
	At         time.Time // the simulated time of the call
}

// PublishedEvent is one entry the agent sent with PutEvents, as received.
type PublishedEvent struct {
	Bus        string // "default" when the entry named none
	Source     string
	DetailType string
	Detail     string // JSON
	At         time.Time
}

// PutMetricData records the datums (Amazon CloudWatch API Reference, "PutMetricData"): Namespace and at
// least one datum are required, at most 1000 datums and 30 dimensions each; a datum needs a name and a finite
// value. Invalid input fails the whole call, as CloudWatch does.
func (c *CloudWatchClient) PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "cloudwatch:PutMetricData")
	if err != nil {
		return nil, err
	}
	defer unlock()
	ns := deref(in.Namespace)
	switch {
	case ns == "":
		return nil, apiError("MissingParameter", "The parameter Namespace is required.")
	case len(in.MetricData) == 0:
		return nil, apiError("MissingParameter", "The parameter MetricData is required.")
	case len(in.MetricData) > maxMetricDatumsPerCall:
		return nil, apiError("InvalidParameterValue", "The collection MetricData must not have a size greater than %d.", maxMetricDatumsPerCall)
	}
	recs := make([]PublishedMetric, 0, len(in.MetricData))
	for i, d := range in.MetricData {
		name := deref(d.MetricName)
		if name == "" {
			return nil, apiError("InvalidParameterValue", "The value for parameter MetricData.member.%d.MetricName is required.", i+1)
		}
		if len(d.Dimensions) > maxDimensionsPerDatum {
			return nil, apiError("InvalidParameterValue", "MetricData.member.%d: at most %d dimensions", i+1, maxDimensionsPerDatum)
		}
		if d.Value == nil || math.IsNaN(*d.Value) || math.IsInf(*d.Value, 0) {
			return nil, apiError("InvalidParameterValue", "MetricData.member.%d.Value must be a finite number", i+1)
		}
		dims := map[string]string{}
		for _, dim := range d.Dimensions {
			if deref(dim.Name) == "" || deref(dim.Value) == "" {
				return nil, apiError("InvalidParameterValue", "MetricData.member.%d: dimension names and values must not be empty", i+1)
			}
			dims[deref(dim.Name)] = deref(dim.Value)
		}
		recs = append(recs, PublishedMetric{Namespace: ns, Name: name, Dimensions: dims, Value: *d.Value, Unit: d.Unit, At: s.now()})
	}
	s.publishedMetrics = append(s.publishedMetrics, recs...)
	return &cloudwatch.PutMetricDataOutput{}, nil
}

// EventBridgeClient is the simulated Amazon EventBridge API: PutEvents is recorded, nothing is routed.
type EventBridgeClient struct{ s *eventBridgeService }

// EventBridge returns the account's Amazon EventBridge API (notifications).
func (a *Account) EventBridge() awsapi.EventBridge { return &EventBridgeClient{s: a.eventBridge} }

// PutEvents records the entries (Amazon EventBridge API Reference, "PutEvents"): 1 to 10 entries and at most
// 256 KB per call fail the whole call; an entry without Source, DetailType or a JSON object Detail fails on
// its own (ErrorCode in its result entry, FailedEntryCount counted), as EventBridge does.
func (c *EventBridgeClient) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eventbridge:PutEvents")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if n := len(in.Entries); n == 0 || n > maxEventEntriesPerCall {
		return nil, apiError("ValidationException", "1 validation error detected: Value at 'entries' failed to satisfy constraint: "+
			"Member must have length less than or equal to %d and greater than or equal to 1", maxEventEntriesPerCall)
	}
	size := 0
	for _, e := range in.Entries {
		size += len(deref(e.Source)) + len(deref(e.DetailType)) + len(deref(e.Detail))
	}
	if size > maxEventsRequestPayload {
		return nil, apiError("ValidationException", "Total size of the entries in the request is over the limit.")
	}
	out := &eventbridge.PutEventsOutput{}
	for _, e := range in.Entries {
		var obj map[string]any
		switch {
		case deref(e.Source) == "", deref(e.DetailType) == "":
			out.FailedEntryCount++
			out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{ErrorCode: ptr("InvalidArgument"),
				ErrorMessage: ptr("Parameters Source and DetailType are required.")})
			continue
		case json.Unmarshal([]byte(deref(e.Detail)), &obj) != nil:
			out.FailedEntryCount++
			out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{ErrorCode: ptr("MalformedDetail"),
				ErrorMessage: ptr("Detail is malformed.")})
			continue
		}
		bus := deref(e.EventBusName)
		if bus == "" {
			bus = "default"
		}
		s.publishedEvents = append(s.publishedEvents, PublishedEvent{Bus: bus, Source: deref(e.Source), DetailType: deref(e.DetailType),
			Detail: deref(e.Detail), At: s.now()})
		out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{EventId: ptr(s.uuid())})
	}
	return out, nil
}

// PublishedMetrics returns every datum received with PutMetricData, in order. Observation helper: not counted.
func (s *cloudWatchService) PublishedMetrics() []PublishedMetric {
	defer s.lock()()
	return append([]PublishedMetric(nil), s.publishedMetrics...)
}

// PublishedEvents returns every entry accepted by PutEvents, in order. Observation helper: not counted.
func (s *eventBridgeService) PublishedEvents() []PublishedEvent {
	defer s.lock()()
	return append([]PublishedEvent(nil), s.publishedEvents...)
}

// String describes a published metric for test failure messages.
func (m PublishedMetric) String() string {
	return fmt.Sprintf("%s/%s%v=%g %s", m.Namespace, m.Name, m.Dimensions, m.Value, m.Unit)
}
