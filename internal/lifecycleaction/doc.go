// Package lifecycleaction handles every Auto Scaling lifecycle action on the agent's hooks: it confirms a
// message against Auto Scaling before acting on it (confirm.go), drains the instance of a terminating action
// through its platform and completes it with CONTINUE once drained (hooks.go, hooks_complete.go), holds the
// drain of the agent's own instance refresh at its deadline (hooks_hold.go), gates a launching action on the
// new instance serving in its cluster (Hooks.launching, hooks.go), heartbeats, adopts actions seen without a
// message (hooks_adopt.go), takes over an action whose owner died (hooks_takeover.go) and claims the
// per-cluster drain budget (clusterbudget.go). Every action's progress is a state.Hook record written before
// its effect. The behaviour is described in the Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling
// lifecycle hooks".
//
// It calls AWS only through internal/providers (providers.LifecycleActions, the hook reader, the warm pool),
// imports no AWS SDK service client, and never imports internal/engine; only internal/agent imports it
// (tools/conventions, TestProductImportRules). Its decisions are tested on in-package fakes of Auto Scaling,
// EC2 and the platform with a memory store and a fake clock (hooks_fakes_test.go), and end to end by
// internal/agent's scenario tests on the simulated account (hooks_*_test.go).
package lifecycleaction
