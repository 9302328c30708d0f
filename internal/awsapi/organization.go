package awsapi

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/organizations"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// The interfaces of the organization-wide operator commands (`audit`, `status`, `pause`, `resume` with
// --organization or --accounts; internal/org). The operator role of cloudformation/operator-role.yaml allows
// exactly their calls, the audit's (audit.go) and OperatorQueue's SendMessage; internal/cfntest checks it.

// Organizations is the AWS Organizations API that lists the member accounts: every account of the
// organization (ListAccounts) or of one organizational unit and the OUs nested in it (ListAccountsForParent
// per OU, ListOrganizationalUnitsForParent to find the nested ones), 20 a page by default.
// Both are callable only from the management account or a delegated administrator of the organization.
type Organizations interface {
	ListAccounts(ctx context.Context, in *organizations.ListAccountsInput, optFns ...func(*organizations.Options)) (*organizations.ListAccountsOutput, error)
	ListAccountsForParent(ctx context.Context, in *organizations.ListAccountsForParentInput, optFns ...func(*organizations.Options)) (*organizations.ListAccountsForParentOutput, error)
	// ListOrganizationalUnitsForParent walks an OU's tree: StackSets deploy to an OU and every OU nested in it.
	ListOrganizationalUnitsForParent(ctx context.Context, in *organizations.ListOrganizationalUnitsForParentInput, optFns ...func(*organizations.Options)) (*organizations.ListOrganizationalUnitsForParentOutput, error)
}

// AssumeRole is the STS call that reaches each member account: the operator role there, with the external
// id it requires. It is made with the caller's own credentials, so the operator role's policy does not list
// it; the caller's identity policy must allow sts:AssumeRole on the role (docs/deploy.md).
type AssumeRole interface {
	AssumeRole(ctx context.Context, in *sts.AssumeRoleInput, optFns ...func(*sts.Options)) (*sts.AssumeRoleOutput, error)
}

// OperatorDynamoDB is the part of the agent's table the organization-wide commands use: Query of the index
// (rollout records and pause locks), and GetItem, PutItem and DeleteItem of the global pause lock only.
type OperatorDynamoDB interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var (
	_ Organizations    = (*organizations.Client)(nil)
	_ AssumeRole       = (*sts.Client)(nil)
	_ OperatorDynamoDB = (*dynamodb.Client)(nil)
)
