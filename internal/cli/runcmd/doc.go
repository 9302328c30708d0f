// Package runcmd holds the run command, which builds the agent's AWS clients and platforms, runs the agent and
// serves its health and metrics, and the healthcheck command, which asks a running agent whether it is ready.
package runcmd
