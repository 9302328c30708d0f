// Package orgsim is a simulated organization for the organization-wide commands: a sim.Organization (AWS
// Organizations and STS AssumeRole, with refusals and hangs), and per member account and region a simulated
// account (internal/sim) holding the agent stack's published names (org.ParameterName), its wake-up queue
// and its state store. The tests of internal/org and cmd/patch-agent and `patch-agent demo --scenario
// organization` run on it.
package orgsim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/org"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// World is the simulated organization.
type World struct {
	Org *sim.Organization
	mu  sync.Mutex
	// members by account id and region
	members map[string]*Member
	// Audit, when set, wraps each member's audit clients (the benchmark's latency and throttling).
	Audit func(org.Target, audit.Clients) audit.Clients
}

// Member is one member account in one region.
type Member struct {
	Target     org.Target
	Account    *sim.Account
	Store      *FlakyStore
	Deployment org.Deployment
}

// New returns a world whose Organizations calls answer pageSize accounts a page.
func New(pageSize int) *World {
	return &World{Org: sim.NewOrganization(pageSize), members: map[string]*Member{}}
}

func key(id, region string) string { return id + "/" + region }

// AddMember adds account t.Account to the organization under ou (once; "" for the root) and, in t.Region,
// the simulated account a (its region should be t.Region) with the agent stack of deployment published:
// the SSM parameter of its names, its wake-up queue and an empty store.
func (w *World) AddMember(t org.Target, ou string, a *sim.Account, deployment string) *Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	known := false
	for _, m := range w.members {
		known = known || m.Target.ID == t.ID
	}
	if !known {
		w.Org.AddAccount(t.ID, t.Name, ou)
	}
	d := org.Deployment{Table: "patch-agent-Table-SIM" + t.ID, QueueURL: a.CreateQueue("patch-agent-Queue", 0, ""),
		WakeUpQueueURL: a.CreateQueue("patch-agent-WakeUpQueue", 0, ""), Stack: "StackSet-patch-agent-" + t.ID}
	a.PutParameter(org.ParameterName(deployment), d.Value())
	m := &Member{Target: t, Account: a, Store: &FlakyStore{Store: state.NewMemory()}, Deployment: d}
	w.members[key(t.ID, t.Region)] = m
	return m
}

// Member returns the member of account id in region, or nil.
func (w *World) Member(id, region string) *Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.members[key(id, region)]
}

// Connector assumes roleName (with externalID) in each target's account through the organization's STS,
// as the AWS connector does, and answers the member's clients.
func (w *World) Connector(roleName, externalID string) org.Connector {
	return org.ConnectorFunc(func(ctx context.Context, t org.Target) (*org.Session, error) {
		in := &sts.AssumeRoleInput{RoleArn: aws.String(fmt.Sprintf("arn:aws:iam::%s:role/%s", t.ID, roleName)),
			RoleSessionName: aws.String("patch-agent")}
		if externalID != "" {
			in.ExternalId = aws.String(externalID)
		}
		if _, err := w.Org.AssumeRole(ctx, in); err != nil {
			return nil, fmt.Errorf("assuming role %s in account %s: %w", roleName, t.ID, err)
		}
		m := w.Member(t.ID, t.Region)
		if m == nil {
			return nil, fmt.Errorf("region %s of account %s: no such simulated region", t.Region, t.ID)
		}
		a := m.Account
		clients := audit.Clients{AutoScaling: a.ReadOnlyAutoScaling(), EC2: a.ReadOnlyEC2(), ECS: a.ReadOnlyECS(), EKS: a.ReadOnlyEKS(), SSM: a.ReadOnlySSM()}
		if w.Audit != nil {
			clients = w.Audit(t, clients)
		}
		return &org.Session{Audit: clients, Store: func(string) state.Store { return m.Store }, Queue: a.OperatorQueue(), Clock: a.Clock()}, nil
	})
}

// ErrInjected is the error of a FlakyStore write made to fail.
var ErrInjected = errors.New("ProvisionedThroughputExceededException: injected")

// FlakyStore is a store whose pause lock writes can be made to fail, for partial failures.
type FlakyStore struct {
	state.Store
	mu   sync.Mutex
	fail int
}

// FailNextWrites makes the next n PutLock, PutLockIfAbsent and LiftLock calls fail with ErrInjected.
func (s *FlakyStore) FailNextWrites(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = n
}

func (s *FlakyStore) injected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail > 0 {
		s.fail--
		return true
	}
	return false
}

// PutLock fails when a failure is pending, else writes.
func (s *FlakyStore) PutLock(ctx context.Context, l state.Lock) error {
	if s.injected() {
		return ErrInjected
	}
	return s.Store.PutLock(ctx, l)
}

// PutLockIfAbsent fails when a failure is pending, else writes unless a lock holds.
func (s *FlakyStore) PutLockIfAbsent(ctx context.Context, l state.Lock, now time.Time) (state.Lock, bool, error) {
	if s.injected() {
		return state.Lock{}, false, ErrInjected
	}
	return s.Store.PutLockIfAbsent(ctx, l, now)
}

// LiftLock fails when a failure is pending, else lifts.
func (s *FlakyStore) LiftLock(ctx context.Context, group string) (state.Lock, bool, error) {
	if s.injected() {
		return state.Lock{}, false, ErrInjected
	}
	return s.Store.LiftLock(ctx, group)
}
