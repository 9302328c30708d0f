// Package schema holds the version of the machine-readable documents the CLI prints: status, history,
// audit, message inspect and demo --json each carry it as their "schemaVersion".
package schema

// Version is the schemaVersion of every JSON document the CLI prints. It changes when a field changes meaning
// or goes away; a field added keeps it, so a consumer ignores the fields it does not know and checks
// schemaVersion for the rest. Every field of version 1 is always present: "" for a string that is not set,
// 0 for a count, [] for a list, null for a time or an object that is not set.
const Version = 1
