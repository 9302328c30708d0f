package sim

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/organizations"
	orgtypes "github.com/aws/aws-sdk-go-v2/service/organizations/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	ststypes "github.com/aws/aws-sdk-go-v2/service/sts/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// Organization is a simulated AWS Organization seen from its management account: AWS Organizations'
// ListAccounts, ListAccountsForParent and ListOrganizationalUnitsForParent (nested OUs), paged, and STS AssumeRole into the member accounts, which can be
// made to refuse (AccessDenied) or never answer. kumo's Organizations and STS have no paging and assume
// every role, so the organization-wide commands are tested on this one.
type Organization struct {
	mu       sync.Mutex
	pageSize int
	accounts []orgtypes.Account
	parent   map[string]string // account id -> OU
	ous      map[string]bool
	ouParent map[string]string // OU -> the OU it is nested in ("" for the root)
	refuse   map[string]string // account id -> why
	hang     map[string]bool
	external map[string]string // account id -> external id its role requires
	denied   bool
	calls    map[string]int
	clock    func() time.Time
}

// NewOrganization returns an organization without accounts whose list calls answer at most pageSize
// accounts a page (AWS Organizations API Reference, ListAccounts: "MaxResults ... 1-20"; default 20).
func NewOrganization(pageSize int) *Organization {
	if pageSize <= 0 || pageSize > 20 {
		pageSize = 20
	}
	return &Organization{pageSize: pageSize, parent: map[string]string{}, ous: map[string]bool{}, ouParent: map[string]string{}, refuse: map[string]string{},
		hang: map[string]bool{}, external: map[string]string{}, calls: map[string]int{}, clock: time.Now}
}

// AddAccount adds an ACTIVE member account in organizational unit ou ("" for the root). Setup helper.
func (o *Organization) AddAccount(id, name, ou string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.accounts = append(o.accounts, orgtypes.Account{Id: aws.String(id), Name: aws.String(name),
		Arn: aws.String("arn:aws:organizations::999999999999:account/o-example/" + id), State: orgtypes.AccountStateActive,
		Status: orgtypes.AccountStatusActive})
	o.parent[id] = ou
	if ou != "" {
		o.ous[ou] = true
	}
}

// AddOU adds organizational unit ou nested in parent ("" for the root; a parent not yet added is added
// under the root). Accounts added with AddAccount in an OU not added here sit in an OU under the root.
// Setup helper.
func (o *Organization) AddOU(ou, parent string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ous[ou] = true
	o.ouParent[ou] = parent
	if parent != "" {
		o.ous[parent] = true
	}
}

// SuspendAccount marks an account SUSPENDED (it is still listed, with its state). Setup helper.
func (o *Organization) SuspendAccount(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.accounts {
		if aws.ToString(o.accounts[i].Id) == id {
			o.accounts[i].State, o.accounts[i].Status = orgtypes.AccountStateSuspended, orgtypes.AccountStatusSuspended
		}
	}
}

// RefuseAssumeRole makes AssumeRole into account id fail with AccessDenied (the role is missing, or does not
// trust the caller). Setup helper.
func (o *Organization) RefuseAssumeRole(id, why string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refuse[id] = why
}

// HangAssumeRole makes AssumeRole into account id never answer until its context ends. Setup helper.
func (o *Organization) HangAssumeRole(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.hang[id] = true
}

// RequireExternalID makes the role of account id trust only callers giving externalID. Setup helper.
func (o *Organization) RequireExternalID(id, externalID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.external[id] = externalID
}

// DenyOrganizations makes the list calls fail as they do outside the management account and its delegated
// administrators (AccessDeniedException). Setup helper.
func (o *Organization) DenyOrganizations() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.denied = true
}

// Calls returns the calls made per operation ("organizations:ListAccounts", "sts:AssumeRole").
func (o *Organization) Calls() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]int, len(o.calls))
	for k, v := range o.calls {
		out[k] = v
	}
	return out
}

var (
	_ awsapi.Organizations = (*Organization)(nil)
	_ awsapi.AssumeRole    = (*Organization)(nil)
)

// page answers one page of accounts: NextToken is the index of the page's first account.
func (o *Organization) page(token *string, maxResults *int32, keep func(id string) bool) ([]orgtypes.Account, *string, error) {
	start := 0
	if t := aws.ToString(token); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(o.accounts) {
			return nil, nil, apiError("InvalidInputException", "You provided an invalid value for NextToken")
		}
		start = n
	}
	size := o.pageSize
	if m := aws.ToInt32(maxResults); m > 0 && int(m) < size {
		size = int(m)
	}
	var out []orgtypes.Account
	i := start
	for ; i < len(o.accounts) && len(out) < size; i++ {
		if keep(aws.ToString(o.accounts[i].Id)) {
			out = append(out, o.accounts[i])
		}
	}
	if i < len(o.accounts) {
		return out, aws.String(strconv.Itoa(i)), nil
	}
	return out, nil, nil
}

func (o *Organization) deniedError(op string) error {
	return apiError("AccessDeniedException", "You don't have permissions to access this resource (%s is callable only from the management account or a delegated administrator).", op)
}

// ListAccounts answers the accounts of the organization, a page at a time.
func (o *Organization) ListAccounts(ctx context.Context, in *organizations.ListAccountsInput, _ ...func(*organizations.Options)) (*organizations.ListAccountsOutput, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls["organizations:ListAccounts"]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.denied {
		return nil, o.deniedError("ListAccounts")
	}
	as, next, err := o.page(in.NextToken, in.MaxResults, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	return &organizations.ListAccountsOutput{Accounts: as, NextToken: next}, nil
}

// ListAccountsForParent answers the accounts directly under ParentId, a page at a time (a page may hold
// fewer accounts than its size, even none, with a NextToken: callers read until NextToken is nil).
func (o *Organization) ListAccountsForParent(ctx context.Context, in *organizations.ListAccountsForParentInput, _ ...func(*organizations.Options)) (*organizations.ListAccountsForParentOutput, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls["organizations:ListAccountsForParent"]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.denied {
		return nil, o.deniedError("ListAccountsForParent")
	}
	ou := aws.ToString(in.ParentId)
	if !o.ous[ou] {
		return nil, apiError("ParentNotFoundException", "We can't find a root or OU with the ParentId that you specified.")
	}
	as, next, err := o.page(in.NextToken, in.MaxResults, func(id string) bool { return o.parent[id] == ou })
	if err != nil {
		return nil, err
	}
	return &organizations.ListAccountsForParentOutput{Accounts: as, NextToken: next}, nil
}

// ListOrganizationalUnitsForParent answers the OUs nested directly in ParentId, sorted by id, a page at a
// time (NextToken is the index of the page's first OU).
func (o *Organization) ListOrganizationalUnitsForParent(ctx context.Context, in *organizations.ListOrganizationalUnitsForParentInput, _ ...func(*organizations.Options)) (*organizations.ListOrganizationalUnitsForParentOutput, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls["organizations:ListOrganizationalUnitsForParent"]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.denied {
		return nil, o.deniedError("ListOrganizationalUnitsForParent")
	}
	parent := aws.ToString(in.ParentId)
	if !o.ous[parent] {
		return nil, apiError("ParentNotFoundException", "We can't find a root or OU with the ParentId that you specified.")
	}
	var children []string
	for ou, p := range o.ouParent {
		if p == parent {
			children = append(children, ou)
		}
	}
	slices.Sort(children)
	start := 0
	if t := aws.ToString(in.NextToken); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(children) {
			return nil, apiError("InvalidInputException", "You provided an invalid value for NextToken")
		}
		start = n
	}
	size := o.pageSize
	if m := aws.ToInt32(in.MaxResults); m > 0 && int(m) < size {
		size = int(m)
	}
	end := min(start+size, len(children))
	out := &organizations.ListOrganizationalUnitsForParentOutput{}
	for _, ou := range children[start:end] {
		out.OrganizationalUnits = append(out.OrganizationalUnits, orgtypes.OrganizationalUnit{Id: aws.String(ou), Name: aws.String(ou),
			Arn: aws.String("arn:aws:organizations::999999999999:ou/o-example/" + ou)})
	}
	if end < len(children) {
		out.NextToken = aws.String(strconv.Itoa(end))
	}
	return out, nil
}

// AssumeRole answers credentials for the role in RoleArn's account, unless that account refuses
// (RefuseAssumeRole, or an external id that is not the one required: AccessDenied) or hangs
// (HangAssumeRole: no answer until ctx ends).
func (o *Organization) AssumeRole(ctx context.Context, in *sts.AssumeRoleInput, _ ...func(*sts.Options)) (*sts.AssumeRoleOutput, error) {
	o.mu.Lock()
	o.calls["sts:AssumeRole"]++
	arn := aws.ToString(in.RoleArn)
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[2] != "iam" || !strings.HasPrefix(parts[5], "role/") {
		o.mu.Unlock()
		return nil, apiError("ValidationError", "%s is not a role ARN", arn)
	}
	account := parts[4]
	hang, why, ext := o.hang[account], o.refuse[account], o.external[account]
	o.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if why == "" && ext != "" && aws.ToString(in.ExternalId) != ext {
		why = "the role requires another external id"
	}
	if why != "" {
		return nil, apiError("AccessDenied", "User: arn:aws:sts::999999999999:assumed-role/platform-admin/operator is not authorized to perform: sts:AssumeRole on resource: %s (%s)", arn, why)
	}
	return &sts.AssumeRoleOutput{
		AssumedRoleUser: &ststypes.AssumedRoleUser{Arn: aws.String(fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/%s", account,
			strings.TrimPrefix(parts[5], "role/"), aws.ToString(in.RoleSessionName))), AssumedRoleId: aws.String("AROAEXAMPLE:" + aws.ToString(in.RoleSessionName))},
		Credentials: &ststypes.Credentials{AccessKeyId: aws.String("ASIASIMULATED" + account), SecretAccessKey: aws.String("simulated"),
			SessionToken: aws.String("simulated"), Expiration: aws.Time(o.clock().Add(time.Hour))},
	}, nil
}
