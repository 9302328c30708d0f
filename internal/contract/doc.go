// Package contract holds the contract tests of the simulated account (internal/sim) against moto, an AWS
// emulator that speaks the real wire protocols: one scenario suite, written against the awsapi interfaces and the
// agent's own providers (internal/providers launch templates, internal/ecsdrain), runs once on internal/sim and
// once on moto_server through the aws-sdk-go-v2 clients the agent uses in production. What passes on both is
// behaviour the simulation shares with a real wire implementation — serialization, pagination and error codes
// included. Where moto is known to differ from AWS, the assertion runs on the simulation only and names the
// AWS documentation the simulation follows; docs/testing.md ("AWS operations over the wire") lists every
// operation and which emulator exercises it, and TestOperationTableCoversEveryAWSAPIMethod holds that table to
// the methods of the awsapi interfaces.
//
// The package has no non-test code besides this comment.
package contract
