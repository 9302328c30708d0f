// Package cli is the plumbing the commands of patch-agent share: the -o/--output formats and the JSON error
// document (schemaVersion), usage errors and exit statuses, the store flags (--table, --state-file) and the
// store they open, AWS credentials, profiles and regions, the pasteable hints that name the next command, and
// the version line. It imports none of the commands (internal/cli/operate, orgcmd, runcmd); cmd/patch-agent
// wires them into the root command.
package cli
