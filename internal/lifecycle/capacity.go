package lifecycle

import (
	"regexp"
)

// capacityFailure matches the StatusMessage of a scaling activity whose launch failed for lack of EC2 capacity,
// On-Demand or Spot (Amazon EC2 Auto Scaling User Guide, "Troubleshoot Amazon EC2 Auto Scaling: EC2 instance
// launch failures": "We currently do not have sufficient <type> capacity in the Availability Zone you
// requested", InsufficientInstanceCapacity; "There is no Spot capacity available that matches your request";
// Amazon EC2 API error codes InsufficientInstanceCapacity, InsufficientCapacity, InsufficientHostCapacity,
// InsufficientReservedInstanceCapacity, UnfulfillableCapacity). Any other failure (an invalid AMI, a missing
// key pair, an instance profile, a limit) is not matched: it halts as before.
var capacityFailure = regexp.MustCompile(`(?i)insufficient\w*capacity|do not have sufficient .* capacity|no spot capacity|unfulfillablecapacity`)

// IsCapacityFailure reports whether a failed scaling activity's StatusMessage (or StatusCode, or an EC2
// Instance Launch Unsuccessful event's StatusMessage) says EC2 had no capacity for the launch.
func IsCapacityFailure(statusMessage string) bool { return capacityFailure.MatchString(statusMessage) }
