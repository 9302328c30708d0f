package testworld

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/schema"
)

// Metric is one series of the demo's metrics as `demo --json` prints it: the CloudWatch metric name, its
// dimensions (Group, Platform, Reason...; {} for an agent-wide metric) and its last value (counters: their
// increase over the run).
type Metric struct {
	Name       string            `json:"name"`
	Dimensions map[string]string `json:"dimensions"`
	Value      float64           `json:"value"`
}

// MetricList returns s.Metrics as a list sorted by name, then by dimensions: the keys of metrics.SeriesKey,
// "Name{K=V,K=V}", taken apart.
func (s Summary) MetricList() []Metric {
	out := make([]Metric, 0, len(s.Metrics))
	keys := make([]string, 0, len(s.Metrics))
	for k := range s.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m := Metric{Name: k, Dimensions: map[string]string{}, Value: s.Metrics[k]}
		if name, dims, ok := strings.Cut(k, "{"); ok {
			m.Name = name
			for _, kv := range strings.Split(strings.TrimSuffix(dims, "}"), ",") {
				if key, v, ok := strings.Cut(kv, "="); ok {
					m.Dimensions[key] = v
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// MarshalJSON writes the summary as the document of `demo --json`: schemaVersion (schema.Version), every
// field present (violations [] when none), the metrics as a list (MetricList).
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary // without the method
	if s.Violations == nil {
		s.Violations = []string{}
	}
	if s.Groups == nil {
		s.Groups = []GroupSummary{}
	}
	return json.Marshal(struct {
		SchemaVersion int `json:"schemaVersion"`
		plain
		Metrics []Metric `json:"metrics"`
	}{schema.Version, plain(s), s.MetricList()})
}

// TimelineSample is one group's state after one agent iteration of a demo (Options.Timeline): At is the
// simulated time since the demo began; the counts are instances — Desired the group's desired capacity,
// Serving those in service and healthy in their cluster (ECS: container instance ACTIVE, agent connected;
// EKS: node Ready, not cordoned), OnTarget those in service on the target AMI, Draining those being
// drained (ECS: DRAINING; EKS: cordoned). Gate names the gate that holds the rollout ("" when none).
type TimelineSample struct {
	At       time.Duration
	Group    string
	Desired  int
	Serving  int
	OnTarget int
	Draining int
	Gate     string
}
