// Package org runs the operator's commands across the member accounts of an AWS Organization: it lists the
// accounts (AWS Organizations, or a file), reaches each through its operator role, and runs one command per
// account and region with bounded concurrency and a timeout per account. An account that cannot be reached,
// fails or hangs is a result with its error, never the end of the run: one report covers every account.
package org

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/organizations"
	"github.com/aws/aws-sdk-go-v2/service/organizations/types"
	"github.com/aws/smithy-go"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// Account is one member account: its 12-digit id and, when known, its name.
type Account struct {
	ID   string `json:"account"`
	Name string `json:"accountName"`
}

// Target is one account and region a command runs in.
type Target struct {
	Account
	Region string `json:"region"`
}

// String names the target in messages: "111122223333 (prod) eu-west-1".
func (t Target) String() string {
	if t.Name == "" {
		return t.ID + " " + t.Region
	}
	return t.ID + " (" + t.Name + ") " + t.Region
}

// Targets returns every account in every region, accounts in the order given, regions in the order given
// within each account; a region given twice is one region (a repeated --region must not run a command, or
// write a pause, twice in the same account and region).
func Targets(accounts []Account, regions []string) []Target {
	var once []string
	for _, r := range regions {
		if !slices.Contains(once, r) {
			once = append(once, r)
		}
	}
	out := make([]Target, 0, len(accounts)*len(once))
	for _, a := range accounts {
		for _, r := range once {
			out = append(out, Target{Account: a, Region: r})
		}
	}
	return out
}

// ManagementOnly says where the Organizations calls may come from; every error of ListAccounts says it.
const ManagementOnly = "AWS Organizations lists accounts only for the management account or a delegated administrator " +
	"of the organization: run with credentials of one of them (--profile), or list the accounts in a file with --accounts FILE. " +
	"StackSets with service-managed permissions do not deploy to the management account, so it has no agent stack " +
	"and no operator role of its own unless you create them there yourself"

// ListAccounts returns the ACTIVE accounts of the organization (ous empty: ListAccounts) or under each
// organizational unit in ous, including the OUs nested in it at any depth, as StackSets deploy to an OU and
// all its children (ListOrganizationalUnitsForParent walks the tree, ListAccountsForParent lists each OU's
// own accounts), reading every page, each account once, sorted by id. Errors name the call, and for a refusal
// (AccessDenied, AWSOrganizationsNotInUse) say where the call must come from (ManagementOnly).
func ListAccounts(ctx context.Context, api awsapi.Organizations, ous []string) ([]Account, error) {
	seen := map[string]bool{}
	var out []Account
	add := func(as []types.Account) {
		for _, a := range as {
			id := aws.ToString(a.Id)
			// SUSPENDED and PENDING_CLOSURE accounts have no stacks to reach.
			if seen[id] || (a.State != "" && a.State != types.AccountStateActive) || (a.State == "" && a.Status != "" && a.Status != types.AccountStatusActive) {
				continue
			}
			seen[id] = true
			out = append(out, Account{ID: id, Name: aws.ToString(a.Name)})
		}
	}
	if len(ous) == 0 {
		p := organizations.NewListAccountsPaginator(api, &organizations.ListAccountsInput{})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, listError("ListAccounts", err)
			}
			add(page.Accounts)
		}
	}
	walked := map[string]bool{}
	queue := slices.Clone(ous)
	for len(queue) > 0 {
		ou := queue[0]
		queue = queue[1:]
		if walked[ou] {
			continue
		}
		walked[ou] = true
		children := organizations.NewListOrganizationalUnitsForParentPaginator(api, &organizations.ListOrganizationalUnitsForParentInput{ParentId: aws.String(ou)})
		for children.HasMorePages() {
			page, err := children.NextPage(ctx)
			if err != nil {
				return nil, listError("ListOrganizationalUnitsForParent "+ou, err)
			}
			for _, c := range page.OrganizationalUnits {
				queue = append(queue, aws.ToString(c.Id))
			}
		}
		p := organizations.NewListAccountsForParentPaginator(api, &organizations.ListAccountsForParentInput{ParentId: aws.String(ou)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, listError("ListAccountsForParent "+ou, err)
			}
			add(page.Accounts)
		}
	}
	slices.SortFunc(out, func(a, b Account) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// listError explains a failed Organizations call.
func listError(call string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "AccessDeniedException", "AccessDenied", "AWSOrganizationsNotInUseException":
			return fmt.Errorf("organizations %s: %s: %w", call, ManagementOnly, err)
		case "ParentNotFoundException":
			return fmt.Errorf("organizations %s: no such organizational unit or root (--ou takes ou-xxxx-xxxxxxxx or r-xxxx): %w", call, err)
		}
	}
	return fmt.Errorf("organizations %s: %w", call, err)
}

var accountID = regexp.MustCompile(`^[0-9]{12}$`)

// ParseAccounts reads an accounts file: one account a line, its 12-digit id, then optionally whitespace and
// a name (the rest of the line). A # starts a comment anywhere on a line (what follows it is no part of the
// name); blank and comment-only lines are skipped, and a UTF-8 byte order mark at the start (as some
// editors write) is ignored. A line whose first field is no account id fails, naming the line, and so does
// an account listed twice, naming both lines: a second name for one account is a mistake to fix, not to
// guess. Accounts are returned in the file's order.
func ParseAccounts(r io.Reader) ([]Account, error) {
	var out []Account
	first := map[string]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		id, name, _ := strings.Cut(strings.ReplaceAll(line, "\t", " "), " ")
		if !accountID.MatchString(id) {
			return nil, fmt.Errorf("line %d: %q is not a 12-digit AWS account id (want: ACCOUNT_ID [NAME])", n, id)
		}
		if at, ok := first[id]; ok {
			return nil, fmt.Errorf("line %d: account %s is listed again (first on line %d): list each account once", n, id, at)
		}
		first[id] = n
		out = append(out, Account{ID: id, Name: strings.TrimSpace(name)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no account in it: write one 12-digit account id a line, optionally followed by a name")
	}
	return out, nil
}

var roleNamePart = regexp.MustCompile(`^[A-Za-z0-9+=,.@_-]+$`)

// CheckRoleName refuses a --role-name that is no role name: an ARN (the account differs per target, so the
// name is given and the ARN built for each), or a '/' that is not part of a path (path/name: empty parts or
// a trailing '/'). It returns the name as it goes into the ARN, without a leading '/'.
func CheckRoleName(name string) (string, error) {
	if strings.HasPrefix(name, "arn:") {
		return "", fmt.Errorf("--role-name %q is an ARN: give the role's name (e.g. patch-agent-operator, or path/name), "+
			"the ARN is built for each account", name)
	}
	trimmed := strings.TrimPrefix(name, "/")
	parts := strings.Split(trimmed, "/")
	for _, p := range parts {
		if !roleNamePart.MatchString(p) {
			return "", fmt.Errorf("--role-name %q is not a role name: want NAME or PATH/NAME, of letters, digits and +=,.@_- "+
				"(an empty part or a trailing '/' is no path)", name)
		}
	}
	if len(parts[len(parts)-1]) > 64 {
		return "", fmt.Errorf("--role-name %q: a role name has at most 64 characters", name)
	}
	return trimmed, nil
}
