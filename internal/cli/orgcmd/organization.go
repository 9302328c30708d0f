package orgcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/organizations"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/org"
	"github.com/patch-agent/patch-agent/internal/state"
)

// DefaultOperatorRole is the role --role-name assumes in each member account by default: the one
// cloudformation/operator-role.yaml creates.
const DefaultOperatorRole = "patch-agent-operator"

// orgFlags are the flags of the organization-wide forms of audit, status, pause and resume.
type orgFlags struct {
	organization bool
	ous          []string
	accountsFile string
	roleName     string
	externalID   string
	concurrency  int
	timeout      time.Duration
	deployment   string
	profile      *string
	regions      *[]string
}

// orgHelp is appended to the --help of each command with the organization-wide form.
const orgHelp = `

Across an organization: --organization (every ACTIVE account of the AWS Organization, or with --ou ID only
the accounts under each organizational unit given, including child OUs, as StackSets deploy) or --accounts FILE (one 12-digit account id a
line, optionally followed by a name; # starts a comment) runs the command in every account, in each --region
given (repeatable; default AWS_REGION, else the region of the --profile), through the role --role-name (default ` + DefaultOperatorRole + `, created in each member
account by cloudformation/operator-role.yaml) assumed with STS, with --external-id when the role requires
one. --organization calls AWS Organizations ListAccounts (with --ou: ListOrganizationalUnitsForParent and
ListAccountsForParent), which answer only the
management account or a delegated administrator of the organization: run it with their credentials
(--profile), or list the accounts in a file. StackSets with service-managed permissions do not deploy to the
management account, so it runs no agent unless you deploy one there yourself.
Up to --concurrency accounts run at once, each for at most --account-timeout; an account whose role cannot
be assumed, that fails or does not answer in time is a row of the report with its error, and the others go
on; the command then exits 1 (audit: 3 when --fail-if-behind finds a group behind).`

// orgStoreHelp is appended to orgHelp for the commands that read or write the agent's table in each account.
const orgStoreHelp = ` The agent's table and queue in each
account are found in the SSM parameter /patch-agent/<DeploymentName>/store that the agent's stack publishes
(--deployment, default ` + org.DefaultDeployment + `).`

// AddOrgFlags registers the organization-wide flags on cmd (--deployment only for the commands that use the
// agent's table) and appends orgHelp to its help.
func AddOrgFlags(cmd *cobra.Command, profile *string, regions *[]string, withDeployment bool) *orgFlags {
	o := &orgFlags{profile: profile, regions: regions}
	fs := cmd.Flags()
	fs.BoolVar(&o.organization, "organization", false, "run in every member account of the AWS Organization (management account or delegated administrator only)")
	fs.StringArrayVar(&o.ous, "ou", nil, "with --organization, only the accounts under this organizational unit `ID`, including child OUs (repeatable)")
	fs.StringVar(&o.accountsFile, "accounts", "", "run in the accounts listed in `FILE`: one account id a line, optionally followed by a name")
	fs.StringVar(&o.roleName, "role-name", DefaultOperatorRole, "name (or path/name, not the ARN) of the role assumed in each member account (cloudformation/operator-role.yaml)")
	fs.StringVar(&o.externalID, "external-id", "", "external id the member accounts' role requires (its ExternalId parameter)")
	fs.IntVar(&o.concurrency, "concurrency", org.DefaultConcurrency, "accounts and regions run at once")
	fs.DurationVar(&o.timeout, "account-timeout", org.DefaultAccountTimeout, "how long one account and region may take before it is reported as not answering")
	if r := fs.Lookup("region"); r != nil && !strings.Contains(r.Usage, "repeatable") {
		r.Usage += "; with --organization or --accounts, repeatable: each region"
	}
	cmd.Long += orgHelp
	if withDeployment {
		fs.StringVar(&o.deployment, "deployment", org.DefaultDeployment, "the agent stack's DeploymentName parameter, which names its SSM parameter /patch-agent/NAME/store")
		cmd.Long += orgStoreHelp
	}
	return o
}

// Enabled says whether the command runs across accounts.
func (o *orgFlags) Enabled() bool { return o.organization || o.accountsFile != "" }

// Check refuses flags that do not go together; conflicting names the one-account flags given too.
func (o *orgFlags) Check(cmd *cobra.Command, conflicting ...string) error {
	fs := cmd.Flags()
	switch {
	case o.organization && o.accountsFile != "":
		return cli.Usage(cmd, errors.New("--organization and --accounts are exclusive: list the accounts from AWS Organizations or from a file"))
	case len(o.ous) > 0 && !o.organization:
		return cli.Usage(cmd, errors.New("--ou needs --organization"))
	case !o.Enabled():
		for _, f := range []string{"role-name", "external-id", "concurrency", "account-timeout", "deployment"} {
			if fs.Lookup(f) != nil && fs.Changed(f) {
				return cli.Usage(cmd, fmt.Errorf("--%s needs --organization or --accounts FILE", f))
			}
		}
		return nil
	case o.concurrency < 1:
		return cli.Usage(cmd, fmt.Errorf("--concurrency %d: at least 1", o.concurrency))
	case o.timeout <= 0:
		return cli.Usage(cmd, fmt.Errorf("--account-timeout %s: must be positive", o.timeout))
	}
	role, err := org.CheckRoleName(o.roleName)
	if err != nil {
		return cli.Usage(cmd, err)
	}
	o.roleName = role
	for _, f := range conflicting {
		if fs.Lookup(f) != nil && fs.Changed(f) {
			return cli.Usage(cmd, fmt.Errorf("--%s %s", f, oneAccountOnly(f)))
		}
	}
	if o.deployment != "" {
		if err := org.CheckDeployment(o.deployment); err != nil {
			return cli.Usage(cmd, err)
		}
	}
	return nil
}

// oneAccountOnly says why a flag of the one-account form does not go with --organization or --accounts.
func oneAccountOnly(flag string) string {
	const across = "with --organization or --accounts"
	switch flag {
	case "table", "queue-url":
		return "names one account's resource: " + across + " the agent's table and queue come from each account's SSM parameter /patch-agent/NAME/store (--deployment NAME)"
	case "state-file":
		return "reads one state snapshot file: it does not go " + across
	case "group":
		return "names one account's group: " + across + " pause and resume act on the global pause of each account"
	case "watch":
		return "redraws one account's table: it does not go " + across + " (run the command again to read every account anew)"
	case "publish-metrics":
		return "publishes to the CloudWatch of the credentials' account: it does not go " + across
	}
	return "does not go " + across
}

// OrgEnv is where the organization-wide forms get their clients: AWS with the caller's credentials, or a
// simulated organization in tests and the demo.
type OrgEnv struct {
	// Connect returns the Organizations client and the connector to member accounts, for profile, regions,
	// the role and external id.
	Connect func(ctx context.Context, profile string, regions []string, role, externalID string) (awsapi.Organizations, org.Connector, error)
	Clock   clock.Clock
}

// OrgEnvironment is the environment of the organization-wide forms (a test replaces it).
var OrgEnvironment = OrgEnv{Clock: clock.RealClock{}, Connect: connectAWSOrganization}

// runner returns the org.Runner of the flags.
func (o *orgFlags) runner(env OrgEnv) org.Runner {
	return org.Runner{Concurrency: o.concurrency, Timeout: o.timeout, Clock: env.Clock}
}

// targets lists the accounts (Organizations or the file) in every region, and returns the connector. Without
// --region (and AWS_REGION, its default) the region is the --profile's, as in the one-account form.
func (o *orgFlags) targets(ctx context.Context, env OrgEnv) ([]org.Target, org.Connector, error) {
	if len(*o.regions) == 0 {
		region, err := profileRegion(ctx, *o.profile)
		if err != nil {
			return nil, nil, err
		}
		if region == "" {
			return nil, nil, cli.RegionRequired("the regions to run in, in every account (repeatable)")
		}
		*o.regions = []string{region}
	}
	var accounts []org.Account
	if o.accountsFile != "" {
		f, err := os.Open(o.accountsFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--accounts: %w", err)
		}
		defer f.Close()
		if accounts, err = org.ParseAccounts(f); err != nil {
			return nil, nil, fmt.Errorf("--accounts %s: %w", o.accountsFile, err)
		}
	}
	orgs, conn, err := env.Connect(ctx, *o.profile, *o.regions, o.roleName, o.externalID)
	if err != nil {
		return nil, nil, err
	}
	if o.organization {
		if accounts, err = org.ListAccounts(ctx, orgs, o.ous); err != nil {
			return nil, nil, err
		}
		if len(accounts) == 0 {
			return nil, nil, errors.New("AWS Organizations lists no ACTIVE account there")
		}
	}
	return org.Targets(accounts, *o.regions), conn, nil
}

// failedExit is the error of an organization-wide run in which some targets failed (exit status 1).
func failedExit(what string, failed []org.TargetResult, total int, again string) error {
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d account-regions %s (listed above)%s", len(failed), total, what, again)
}

// profileRegion returns the region of profile (or of the default profile and AWS_CONFIG_FILE, as the SDK
// resolves it), "" when it names none.
func profileRegion(ctx context.Context, profile string) (string, error) {
	cfg, err := cli.LoadProfile(ctx, profile)
	return cfg.Region, err
}

// connectAWSOrganization loads the caller's configuration (profile, the first region) and returns the
// Organizations client and a connector that assumes role in each account, once per account (the
// credentials are cached and shared by its regions).
func connectAWSOrganization(ctx context.Context, profile string, regions []string, role, externalID string) (awsapi.Organizations, org.Connector, error) {
	base, err := cli.LoadAWSConfig(ctx, profile, regions[0], auditMaxAttempts, cli.RegionRequired("the regions to run in"))
	if err != nil {
		return nil, nil, err
	}
	return organizations.NewFromConfig(base), &awsConnector{base: base, stsAPI: sts.NewFromConfig(base), role: role, externalID: externalID,
		creds: map[string]*aws.CredentialsCache{}}, nil
}

// awsConnector reaches member accounts through STS AssumeRole.
type awsConnector struct {
	base             aws.Config
	stsAPI           stscreds.AssumeRoleAPIClient
	role, externalID string
	mu               sync.Mutex
	creds            map[string]*aws.CredentialsCache
}

// partition is the ARN partition of region.
func partition(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}

// Connect assumes the role in t's account (cached per account) and returns the clients in t's region.
func (c *awsConnector) Connect(ctx context.Context, t org.Target) (*org.Session, error) {
	arn := fmt.Sprintf("arn:%s:iam::%s:role/%s", partition(t.Region), t.ID, c.role)
	c.mu.Lock()
	cache, ok := c.creds[t.ID]
	if !ok {
		cache = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(c.stsAPI, arn, func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = "patch-agent-operator"
			if c.externalID != "" {
				o.ExternalID = aws.String(c.externalID)
			}
		}))
		c.creds[t.ID] = cache
	}
	c.mu.Unlock()
	if _, err := cache.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("assuming %s: %s (the role is created by cloudformation/operator-role.yaml and must trust your account; check --role-name and --external-id)", arn, cli.Innermost(err))
	}
	cfg := c.base.Copy()
	cfg.Region, cfg.Credentials = t.Region, cache
	table := dynamodb.NewFromConfig(cfg)
	return &org.Session{
		Audit: audit.Clients{AutoScaling: autoscaling.NewFromConfig(cfg), EC2: ec2.NewFromConfig(cfg), ECS: ecs.NewFromConfig(cfg),
			EKS: eks.NewFromConfig(cfg), SSM: ssm.NewFromConfig(cfg)},
		Store: func(name string) state.Store { return state.NewDynamoDB(operatorTable{table}, name) },
		Queue: sqs.NewFromConfig(cfg),
	}, nil
}

// operatorTable is the agent's table as the operator role may use it (awsapi.OperatorDynamoDB): the calls
// outside it fail here, before AWS would refuse them.
type operatorTable struct{ awsapi.OperatorDynamoDB }

var errNotOperatorCall = errors.New("not a call of the organization-wide commands (awsapi.OperatorDynamoDB): the operator role does not allow it")

func (operatorTable) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return nil, fmt.Errorf("dynamodb:GetItem: %w", errNotOperatorCall)
}
func (operatorTable) Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return nil, fmt.Errorf("dynamodb:Scan: %w", errNotOperatorCall)
}
func (operatorTable) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, fmt.Errorf("dynamodb:UpdateItem: %w", errNotOperatorCall)
}
func (operatorTable) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return nil, fmt.Errorf("dynamodb:TransactWriteItems: %w", errNotOperatorCall)
}

var _ state.DynamoDBAPI = operatorTable{}
