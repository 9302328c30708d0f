// Package model holds what the rest of the agent reasons about: targets (an opted-in Auto Scaling group or
// EKS managed node group) and their policy tags, the view of a group in one look (GroupView, InstanceView,
// NodeState), what the providers saw for one step (Inputs), the rollout settings (Policy), the platform and
// observer interfaces, alerts, retry back-off and the names of lifecycle action results.
//
// It performs no I/O and imports no AWS service client; of this module it depends on internal/state alone: a
// model value is built by a provider (internal/providers) and read by the rollout engine (internal/engine)
// and the lifecycle actions (internal/lifecycleaction). It may use the SDK's data types (a GroupView carries
// the described astypes.AutoScalingGroup). The import rules are checked by tools/conventions
// (TestProductImportRules).
package model
