// Package eksupgrade upgrades an Amazon EKS cluster by one Kubernetes minor version as a persisted, resumable
// workflow (`patch-agent eks upgrade`, docs/eks-upgrade.md):
//
//	Preflight ─► approval ─► control plane ─► add-ons (one at a time) ─► node groups (one at a time) ─► Completed
//	    │            │             │                   │                          │
//	    └► Halted    └► Waiting     └──────────────────┴── update Failed ──────────┴─► Halted (nothing after it)
//
// The workflow is one record in the agent's store (state.Workflow, pk upgrade#<cluster> sk workflow), rewritten
// with one conditional write per transition BEFORE the AWS call that depends on it, and every step is appended
// to the history of "eks:<cluster>" (who, when, from, to, update ids). An update step first writes its
// ClientRequestToken (Requested), then calls EKS with that token and writes the update id (InProgress), then
// tracks the update with DescribeUpdate until it is Successful (Completed) or Failed (Halted). A run resumed
// after a crash finds the update a Requested step may have started (ListUpdates) before it calls again, and
// calls with the same token, so no update is ever started twice.
//
// A lease on the record (owner and expiry, renewed while tracking) refuses a second concurrent invocation. A
// pause lock — the global one, or `patch-agent pause --group eks:<cluster>` — holds every new update call;
// updates in flight are tracked to their end.
package eksupgrade
