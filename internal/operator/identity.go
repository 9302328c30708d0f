package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/state"
)

// HistorySoakSkipped is the Event of the history entry ApproveSkippingSoak appends (Detail: "by WHO: REASON").
const HistorySoakSkipped = "soak-skipped"

// soakReasonPrefix starts the Reason of a rollout that waits for its soak time (engine.Orchestrator).
const soakReasonPrefix = "soak:"

// CallerIdentity returns the ARN of the credentials the command runs with (STS GetCallerIdentity: an IAM user,
// or arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION for a role or SSO session): who approved, recorded with
// the change instead of a local user name, which anyone can set. GetCallerIdentity needs no IAM permission.
// Errors: the call's, wrapped; an answer without an Arn.
func CallerIdentity(ctx context.Context, api awsapi.STS) (string, error) {
	out, err := api.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", fmt.Errorf("asking STS who is acting (GetCallerIdentity): %w", err)
	}
	arn := aws.ToString(out.Arn)
	if arn == "" {
		return "", errors.New("STS GetCallerIdentity answered no Arn")
	}
	return arn, nil
}

// WaitingForSoak reports whether r waits for its soak time to end (phase Waiting, reason "soak: ...").
func WaitingForSoak(r state.Rollout) bool {
	return r.Phase == state.PhaseWaiting && strings.HasPrefix(r.Reason, soakReasonPrefix)
}

// ApproveSkippingSoak records that who approved the group's current target AMI and skipped its soak time
// (`patch-agent approve GROUP --skip-soak --reason ...`): ApprovedImage and SkipSoakImage = TargetImageID,
// ApprovedBy = who, SkipSoakReason = reason, with a "soak-skipped" history entry (Detail "by WHO: REASON") in
// the same atomic write. The agent starts the rollout at its next tick unless another gate (pause, window,
// alarm, the AMI gate) holds it, and then sends a SoakSkipped alert naming who. The skip is for that AMI
// only. Only a rollout that waits for its soak or its approval (phase Waiting, or Detected) is accepted. A
// non-empty image is the AMI the operator reviewed, as for Approve.
// Errors: group, who or reason empty; no rollout record (wraps state.ErrNotFound); no target AMI; a target other
// than image; another phase or gate; a second conflict (wraps state.ErrConflict); the store's error.
func ApproveSkippingSoak(ctx context.Context, store state.Store, group, image, who, reason string, now time.Time) (state.Rollout, error) {
	switch {
	case group == "":
		return state.Rollout{}, errors.New("approve needs a group")
	case strings.TrimSpace(who) == "":
		return state.Rollout{}, errors.New("skipping the soak needs to say who approved")
	case strings.TrimSpace(reason) == "":
		return state.Rollout{}, errors.New("--skip-soak needs --reason: say why the AMI cannot wait for its soak time (it is recorded in the history and the notification)")
	}
	return update(ctx, store, group, func(r *state.Rollout) (bool, error) {
		if r.TargetImageID == "" {
			return false, fmt.Errorf("group %s has no target AMI to approve yet (phase %s)", group, r.Phase)
		}
		if err := approvingImage(group, image, *r); err != nil {
			return false, err
		}
		if r.Phase != state.PhaseDetected && !WaitingForSoak(*r) && !WaitingForApproval(*r) {
			return false, fmt.Errorf("group %s is not waiting for its soak or approval (phase %s, reason: %q): nothing to skip", group, r.Phase, r.Reason)
		}
		if r.SkipSoakImage == r.TargetImageID && r.ApprovedImage == r.TargetImageID && r.ApprovedBy == who && r.SkipSoakReason == reason {
			return false, nil
		}
		r.ApprovedImage, r.ApprovedBy = r.TargetImageID, who
		r.SkipSoakImage, r.SkipSoakReason = r.TargetImageID, reason
		return true, nil
	}, func(r state.Rollout) []state.HistoryEntry {
		return []state.HistoryEntry{{Group: group, At: now, Event: HistorySoakSkipped, NewImage: r.TargetImageID, Detail: "by " + who + ": " + reason}}
	})
}
