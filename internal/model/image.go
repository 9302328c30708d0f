package model

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ResolvedAMI is the AMI a parameter names at one moment.
type ResolvedAMI struct {
	Parameter    string    `json:"parameter"`
	ImageID      string    `json:"imageId"`
	ImageName    string    `json:"imageName,omitempty"` // from the JSON "recommended" document, when present
	Version      int64     `json:"version"`             // the parameter's Version (informational only: C13)
	LastModified time.Time `json:"lastModified"`        // the parameter's LastModifiedDate: the AMI's age is measured from it
}

// Gate tags on an Auto Scaling group (optional).
const (
	// TagAllowedAMIOwners adds AMI owners the group accepts: AWS account ids (12 digits) or owner aliases
	// (amazon, aws-marketplace, aws-backup-vault), separated by spaces or commas; "self" is the agent's account.
	TagAllowedAMIOwners = "patch-agent/allowed-ami-owners"
	// TagAllowAMIFamilyChange set to "true" lets the group move to an AMI of another OS family (AL2 to AL2023,
	// AL2 to Bottlerocket, ...). Default false: such an AMI is refused.
	TagAllowAMIFamilyChange = "patch-agent/allow-ami-family-change"
)

// amiRefusedPrefix starts the Reason of a rollout whose target AMI the gate refused.
const AMIRefusedPrefix = "AMI refused: "

// AMIRejection is why the gate refused an AMI for a group.
type AMIRejection struct {
	// ImageID is the refused AMI.
	ImageID string
	// Reason is one of the Reject* codes.
	Reason string
	// Detail says what EC2 answered and what would let the AMI pass, in an operator's words.
	Detail string
}

// StatusReason is the rollout Reason the refusal writes ("AMI refused: ...").
func (r AMIRejection) StatusReason() string {
	return fmt.Sprintf("%s%s %s (%s)", AMIRefusedPrefix, r.ImageID, r.Detail, r.Reason)
}

// amiOwnerAliases are the owner aliases EC2 reports in ImageOwnerAlias (Amazon EC2 API Reference, "Image"),
// plus "self" for the agent's own account.
var amiOwnerAliases = []string{"amazon", "aws-marketplace", "aws-backup-vault", "self"}

// AccountIDPattern matches an AWS account id: twelve digits.
var AccountIDPattern = regexp.MustCompile(`^[0-9]{12}$`)

// ParseAMIOwners parses a list of AMI owners separated by spaces or commas: 12-digit AWS account ids or the
// aliases amazon, aws-marketplace, aws-backup-vault and self. It returns an error naming every entry that is
// neither.
func ParseAMIOwners(v string) ([]string, error) {
	var out, bad []string
	for _, o := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		o = strings.ToLower(strings.TrimSpace(o))
		if !AccountIDPattern.MatchString(o) && !slices.Contains(amiOwnerAliases, o) {
			bad = append(bad, fmt.Sprintf("%q", o))
			continue
		}
		out = append(out, o)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%s: want 12-digit AWS account ids or %s", strings.Join(bad, ", "), strings.Join(amiOwnerAliases, ", "))
	}
	return out, nil
}
