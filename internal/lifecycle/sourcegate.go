package lifecycle

// sourceGate returns why no new destructive step may start because the target's AMI source names no usable
// AMI ("source missing: parameter /x was deleted", "source missing: parameter /x does not exist", or why its
// value is not an AMI id), or "" when the source names one. It holds a rollout that has not started
// (Detected, Waiting) and any new instance refresh; unlike a closed maintenance window it does not cancel a
// refresh already running (its AMI passed every gate when it started). A source that names an
// AMI again lifts it at the next tick.
func sourceGate(in Inputs) string {
	if in.AMI != nil || in.SourceProblem == "" {
		return ""
	}
	return in.SourceProblem
}
