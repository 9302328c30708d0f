// Package orgcmd holds the organization-wide forms of the operator's commands (--organization, --accounts:
// one role assumed per member account, run in each region) that status, pause and resume take, and the audit
// command: the account's groups, the organization's, or infrastructure code with --iac.
package orgcmd
