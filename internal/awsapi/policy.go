package awsapi

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// STS is the AWS Security Token Service call the operator commands make to name who approved, paused or
// skipped a gate: the caller's ARN, never a local user name. GetCallerIdentity needs no IAM permission (AWS
// STS API Reference, "GetCallerIdentity": no permissions are required to perform this operation).
type STS interface {
	GetCallerIdentity(ctx context.Context, in *sts.GetCallerIdentityInput, optFns ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error)
}

var _ STS = (*sts.Client)(nil)
