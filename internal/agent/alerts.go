package agent

import (
	"errors"
	"sync"

	"github.com/patch-agent/patch-agent/internal/model"
)

// alertMemory remembers, per group, the problem last alerted, so that an alert is sent once per change and
// not on every pass: an AMI source that went missing or came back, a tag the agent does not accept.
type alertMemory struct {
	mu sync.Mutex
	// source: group -> the source problem last seen for it ("" = none)
	source map[string]string
	// misconfigured: group -> the misconfiguration last alerted for it
	misconfigured map[string]string
}

// Source transitions that sourceChange reports.
const (
	sourceUnchanged = iota
	sourceMissing
	sourceRestored
)

// sourceChange records the source problem of group now ("" when its source names an AMI) and reports what
// changed since the last call: sourceMissing when a problem appeared (once per outage, however its wording
// changes), sourceRestored when it went away, sourceUnchanged otherwise. A group seen for the first time
// reports only a problem.
func (m *alertMemory) sourceChange(group, problem string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.source == nil {
		m.source = map[string]string{}
	}
	prev, seen := m.source[group]
	m.source[group] = problem
	switch {
	case prev == problem || (!seen && problem == ""):
		return sourceUnchanged
	case problem == "":
		return sourceRestored
	case prev != "":
		return sourceUnchanged // still missing, in other words (deleted, then found not to exist)
	}
	return sourceMissing
}

// newMisconfigurations records the misconfigured groups of a pass and returns those whose misconfiguration
// was not alerted yet (the Auto Scaling groups of EKS managed node groups are not misconfigured). A full pass
// (full) also forgets the groups no longer misconfigured, so that a later typo is heard again; a pass over
// some targets leaves the others'.
func (m *alertMemory) newMisconfigurations(misconfigured map[string]error, full bool) map[string]error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.misconfigured == nil {
		m.misconfigured = map[string]string{}
	}
	fresh := map[string]error{}
	for g, err := range misconfigured {
		if errors.Is(err, model.ErrManagedNodegroupGroup) || m.misconfigured[g] == err.Error() {
			continue
		}
		m.misconfigured[g] = err.Error()
		fresh[g] = err
	}
	if full {
		for g := range m.misconfigured {
			if _, still := misconfigured[g]; !still {
				delete(m.misconfigured, g)
			}
		}
	}
	return fresh
}
