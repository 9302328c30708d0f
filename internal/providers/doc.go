// Package providers owns every AWS and Kubernetes call the rollout engine and the lifecycle actions need,
// with its SDK inputs and caches: discovery of opted-in groups and their hooks (target.go, hooks.go), group
// views with the image each instance runs (view.go, warmpool.go), instance refreshes (refreshes.go), launch
// template versions (launchtemplate.go), AMI resolution from SSM and the AMI gate (ami.go, amigate.go), alarms
// (alarms.go), EKS managed node groups (nodegroups.go), the lifecycle action calls (lifecycleactions.go:
// complete, heartbeat, the instance as Auto Scaling and EC2 describe it) and the ECS and EKS platforms
// (platform.go, eks_platform.go, eks_source.go).
//
// Providers return internal/model values; they never decide what a rollout does next. They import neither
// internal/engine nor internal/lifecycleaction (tools/conventions, TestProductImportRules).
package providers
