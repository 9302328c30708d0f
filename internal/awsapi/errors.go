package awsapi

import (
	"errors"
	"strings"

	"github.com/aws/smithy-go"
)

// errorCode returns the AWS error code of err (smithy.APIError), or "" when err carries none.
func errorCode(err error) (code, message string) {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode(), apiErr.ErrorMessage()
	}
	return "", ""
}

// IsNoActiveLifecycleAction reports whether err is Auto Scaling's answer to CompleteLifecycleAction or
// RecordLifecycleActionHeartbeat for a token that is no longer active: ValidationError "No active Lifecycle
// Action found with token ..." (the action was already completed, timed out, or this is a duplicate delivery).
// Callers treat it as final (field case C6).
func IsNoActiveLifecycleAction(err error) bool {
	code, msg := errorCode(err)
	return code == "ValidationError" && strings.Contains(msg, "No active Lifecycle Action found")
}

// IsInstanceNotFound reports whether err says an EC2 instance id does not exist
// (EC2 InvalidInstanceID.NotFound / InvalidInstanceID.Malformed, or Auto Scaling's ValidationError
// "Instance Id not found").
func IsInstanceNotFound(err error) bool {
	code, msg := errorCode(err)
	switch code {
	case "InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed":
		return true
	case "ValidationError":
		return strings.Contains(msg, "Instance Id not found") || strings.Contains(msg, "not found")
	}
	return false
}

// IsThrottled reports whether err is an AWS throttling error. The SDK's standard retryer already retries
// these; workflow code uses it to back off instead of failing a step.
func IsThrottled(err error) bool {
	code, _ := errorCode(err)
	switch code {
	case "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
		"RequestThrottled", "RequestThrottledException", "SlowDown":
		return true
	}
	return false
}

// IsParameterNotFound reports whether err is SSM's ParameterNotFound.
func IsParameterNotFound(err error) bool {
	code, _ := errorCode(err)
	return code == "ParameterNotFound"
}

// IsImageNotFound reports whether err is EC2's answer to DescribeImages for an AMI it does not know:
// InvalidAMIID.NotFound (never registered, or deregistered and no longer listed) or InvalidAMIID.Unavailable
// (Amazon EC2 API Reference, "Error codes for the Amazon EC2 API").
func IsImageNotFound(err error) bool {
	code, _ := errorCode(err)
	return code == "InvalidAMIID.NotFound" || code == "InvalidAMIID.Unavailable"
}
