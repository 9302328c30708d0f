package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/sim"
)

// Violation is one broken invariant (docs/architecture.md, "Invariants"), seen at one moment.
type Violation struct {
	At        time.Time `json:"at"`
	Invariant int       `json:"invariant"`
	Group     string    `json:"group,omitempty"`
	Detail    string    `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s invariant %d (%s): %s", v.At.Format(time.TimeOnly), v.Invariant, v.Group, v.Detail)
}

// Checker asserts the invariants of docs/architecture.md on the simulated account after every step of a scenario:
//
//  1. serving capacity (InService, ACTIVE, agent connected, not DRAINING; for EKS groups InService with a
//     Ready, uncordoned node) never below the group's baseline desired capacity (the desired capacity
//     without the agent's surge);
//  2. no instance terminated through the API before it was drained, and no terminating lifecycle action
//     completed with CONTINUE by the agent before its instance was drained;
//  3. at most one instance per group being replaced (InService and DRAINING) at a time, and desired at most
//     baseline+1;
//  4. no lifecycle action completed more than once (accepted), and at the end every one completed.
type Checker struct {
	Account *sim.Account
	// Baseline is each group's desired capacity as the user set it.
	Baseline map[string]int32
	// BatchSize is how many instances of one group may be replaced at once (default 1).
	BatchSize int

	Violations []Violation
	// MinServing is the lowest serving capacity seen per group.
	MinServing map[string]int

	// EKS names the groups whose instances are Kubernetes nodes (KubeSim): they serve when InService with a
	// Ready, uncordoned node, are being replaced when cordoned, and are drained when cordoned with no pod left
	// to evict. Nodes reports those nodes by instance id.
	EKS   map[string]bool
	Nodes func() (map[string]NodeObservation, error)

	// Managed names the groups whose desired capacity ECS managed scaling owns (capacity providers): for them
	// invariant 1 is about workloads — every service keeps at least its desired count of tasks RUNNING
	// (Workloads) — and desired capacity may move without the agent.
	Managed map[string]bool
	// Workloads are "cluster/service" -> desired count of the services whose tasks must keep running.
	Workloads map[string]int
	// ECSDrains names the groups with ECS managed draining: ECS drains an instance after its termination is
	// requested, so invariant 2 holds when the instance was drained before it started shutting down.
	ECSDrains map[string]bool

	seenTerminations int
	seenCompletions  int
	proceedChecked   map[string]bool
}

// NewChecker returns a checker for the given baselines.
func NewChecker(a *sim.Account, baseline map[string]int32) *Checker {
	return &Checker{Account: a, Baseline: baseline, BatchSize: 1, MinServing: map[string]int{}, proceedChecked: map[string]bool{}}
}

// Check looks at the account now and records any violation. It returns the violations found in this call.
func (c *Checker) Check() []Violation {
	now := c.Account.Clock().Now()
	var found []Violation
	add := func(inv int, group, format string, args ...any) {
		found = append(found, Violation{At: now, Invariant: inv, Group: group, Detail: fmt.Sprintf(format, args...)})
	}
	nodes := c.nodes(add)
	for group, base := range c.Baseline {
		g := c.Account.Group(group)
		serving, draining := 0, 0
		for _, i := range g.Instances {
			if c.EKS[group] {
				n, ok := nodes[i.ID]
				if i.LifecycleState == "InService" && ok && n.Ready && !n.Cordoned {
					serving++
				}
				if i.LifecycleState == "InService" && ok && n.Cordoned {
					draining++
				}
				continue
			}
			if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected {
				serving++
			}
			if i.ContainerInstanceStatus == "DRAINING" && i.LifecycleState == "InService" {
				draining++ // being replaced by a rollout (instances leaving through a hook are already Terminating)
			}
		}
		if m, ok := c.MinServing[group]; !ok || serving < m {
			c.MinServing[group] = serving
		}
		if draining > max(c.BatchSize, 1) {
			add(3, group, "%d instances DRAINING at once (batch size %d)", draining, c.BatchSize)
		}
		if c.Managed[group] {
			continue
		}
		if int32(serving) < base {
			add(1, group, "serving capacity %d below desired %d", serving, base)
		}
		if g.Desired > base+int32(max(c.BatchSize, 1)) {
			add(3, group, "desired capacity %d above baseline %d + batch size", g.Desired, base)
		}
	}
	for key, want := range c.Workloads {
		cluster, service, _ := strings.Cut(key, "/")
		if running := c.Account.ServiceTasks(cluster, service); running < want {
			add(1, cluster, "service %s runs %d task(s), desired %d", service, running, want)
		}
	}
	terms := c.Account.Terminations()
	for _, t := range terms[c.seenTerminations:] {
		if c.EKS[t.Group] {
			if n, ok := nodes[t.InstanceID]; t.Cause == "api" && ok && !n.drained() {
				add(2, t.Group, "instance %s terminated while its node %s was not drained (cordoned %v, %d pod(s) to evict)",
					t.InstanceID, n.Name, n.Cordoned, n.Evictable)
			}
			continue
		}
		if t.Cause == "api" && !t.DrainedAtRequest && !c.ECSDrains[t.Group] {
			add(2, t.Group, "instance %s terminated while not drained (container instance %s, %d task(s) not STOPPED)",
				t.InstanceID, t.ContainerInstanceStatus, t.NonStoppedTasks)
		}
	}
	c.seenTerminations = len(terms)
	for _, t := range terms {
		if t.Cause == "api" && c.ECSDrains[t.Group] && t.Proceeded && !c.proceedChecked[t.InstanceID] {
			c.proceedChecked[t.InstanceID] = true
			if !t.DrainedAtProceed {
				add(2, t.Group, "instance %s started shutting down before ECS managed draining drained it", t.InstanceID)
			}
		}
	}
	accepted := map[string]int{}
	comps := c.Account.LifecycleCompletions()
	for _, comp := range comps[c.seenCompletions:] {
		if n, ok := nodes[comp.InstanceID]; c.EKS[comp.Group] && ok {
			comp.Drained = n.drained()
		}
		if comp.Accepted && comp.Caller == sim.CallerAPI && comp.Transition == sim.TransitionTerminating &&
			comp.Result == sim.ResultContinue && !comp.Drained {
			add(2, comp.Group, "terminating lifecycle action of %s completed (CONTINUE) while the instance was not drained", comp.InstanceID)
		}
	}
	c.seenCompletions = len(comps)
	for _, comp := range comps {
		if comp.Accepted {
			accepted[comp.Token]++
			if accepted[comp.Token] == 2 {
				add(4, comp.Group, "lifecycle action %s of %s completed twice", comp.Token, comp.InstanceID)
			}
		}
	}
	c.Violations = append(c.Violations, found...)
	return found
}

// nodes returns the Kubernetes nodes of the EKS groups (none without EKS groups); a failed look is recorded.
func (c *Checker) nodes(add func(inv int, group, format string, args ...any)) map[string]NodeObservation {
	if len(c.EKS) == 0 || c.Nodes == nil {
		return nil
	}
	n, err := c.Nodes()
	if err != nil {
		add(0, "", "reading the Kubernetes nodes: %v", err)
	}
	return n
}
