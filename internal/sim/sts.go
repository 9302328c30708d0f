package sim

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// stsService is AWS STS: the identity GetCallerIdentity answers.
type stsService struct {
	*world

	callerARN string
}

// STSClient is the simulated AWS Security Token Service. It implements awsapi.STS.
type STSClient struct{ s *stsService }

var _ awsapi.STS = (*STSClient)(nil)

// STS returns the account's simulated STS API.
func (a *Account) STS() *STSClient { return &STSClient{s: a.sts} }

// SetCallerARN sets the identity GetCallerIdentity answers (default
// arn:aws:sts::<account>:assumed-role/PatchAgentOperator/operator). Setup helper: not counted.
func (s *stsService) SetCallerARN(arn string) {
	defer s.lock()()
	s.callerARN = arn
}

// GetCallerIdentity answers the caller's Account, Arn and UserId. AWS STS API Reference, "GetCallerIdentity":
// it needs no permission, and for an assumed role the Arn is arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION.
func (c *STSClient) GetCallerIdentity(ctx context.Context, _ *sts.GetCallerIdentityInput, _ ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "sts:GetCallerIdentity")
	if err != nil {
		return nil, err
	}
	defer unlock()
	arn := s.callerARN
	if arn == "" {
		arn = "arn:aws:sts::" + s.opts.AccountID + ":assumed-role/PatchAgentOperator/operator"
	}
	return &sts.GetCallerIdentityOutput{Account: ptr(s.opts.AccountID), Arn: ptr(arn), UserId: ptr("AROAEXAMPLEOPERATOR:operator")}, nil
}
