package demo

import (
	"fmt"
	"time"

	"github.com/patch-agent/patch-agent/internal/sim"
)

// Violation is one broken invariant of ../shared/DESIGN.md, seen at one moment.
type Violation struct {
	At        time.Time `json:"at"`
	Invariant int       `json:"invariant"`
	Group     string    `json:"group,omitempty"`
	Detail    string    `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s invariant %d (%s): %s", v.At.Format(time.TimeOnly), v.Invariant, v.Group, v.Detail)
}

// Checker asserts the DESIGN.md invariants on the simulated account after every step of a scenario:
//
//  1. serving capacity (InService, ACTIVE, agent connected, not DRAINING) never below the group's baseline
//     desired capacity (the desired capacity without the agent's surge);
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

	seenTerminations int
	seenCompletions  int
}

// NewChecker returns a checker for the given baselines.
func NewChecker(a *sim.Account, baseline map[string]int32) *Checker {
	return &Checker{Account: a, Baseline: baseline, BatchSize: 1, MinServing: map[string]int{}}
}

// Check looks at the account now and records any violation. It returns the violations found in this call.
func (c *Checker) Check() []Violation {
	now := c.Account.Clock().Now()
	var found []Violation
	add := func(inv int, group, format string, args ...any) {
		found = append(found, Violation{At: now, Invariant: inv, Group: group, Detail: fmt.Sprintf(format, args...)})
	}
	for group, base := range c.Baseline {
		g := c.Account.Group(group)
		serving, draining := 0, 0
		for _, i := range g.Instances {
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
		if int32(serving) < base {
			add(1, group, "serving capacity %d below desired %d", serving, base)
		}
		if draining > max(c.BatchSize, 1) {
			add(3, group, "%d instances DRAINING at once (batch size %d)", draining, c.BatchSize)
		}
		if g.Desired > base+int32(max(c.BatchSize, 1)) {
			add(3, group, "desired capacity %d above baseline %d + batch size", g.Desired, base)
		}
	}
	terms := c.Account.Terminations()
	for _, t := range terms[c.seenTerminations:] {
		if t.Cause == "api" && !t.DrainedAtRequest {
			add(2, t.Group, "instance %s terminated while not drained (container instance %s, %d task(s) not STOPPED)",
				t.InstanceID, t.ContainerInstanceStatus, t.NonStoppedTasks)
		}
	}
	c.seenTerminations = len(terms)
	accepted := map[string]int{}
	comps := c.Account.LifecycleCompletions()
	for _, comp := range comps[c.seenCompletions:] {
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
