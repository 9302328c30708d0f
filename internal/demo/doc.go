// Package demo runs the real agent in-process against a simulated AWS account (internal/testworld) on a
// simulated clock: an ECS cluster on an Auto Scaling group whose golden-AMI parameter changes, rolled to the
// new AMI by instance refresh while the invariants of docs/architecture.md are checked after every step. It
// holds the narrative only: the scenarios, the progress lines and table a user reads, the timeline, and the
// audit, organization, managed node group and EKS upgrade stories.
package demo
