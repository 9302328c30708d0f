// Package operate holds the operator's commands on a running fleet: status and history, pause and resume,
// approve, retry, rollback (with its check of the AMI source), message inspect, eks upgrade, and the wake-up
// each command that changes a record sends the agent after its durable write.
package operate
