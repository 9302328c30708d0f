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

// IsServerFault reports whether err is an AWS server-side fault: an API error the SDK decoded with
// smithy.FaultServer (HTTP 5xx), or one of the 5xx codes of the services' Common Errors (InternalFailure,
// InternalError, ServiceUnavailable ...) when the fault side is unknown. The same request may succeed later.
func IsServerFault(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	if apiErr.ErrorFault() == smithy.FaultServer {
		return true
	}
	switch apiErr.ErrorCode() {
	case "InternalFailure", "InternalError", "InternalServerError", "InternalServiceError", "ServerException",
		"ServiceUnavailable", "ServiceUnavailableException", "Unavailable", "RequestTimeout", "RequestTimeoutException":
		return true
	}
	return false
}

// IsTimeout reports whether err is a request that got no answer in time: a transport error whose Timeout()
// is true (net/http's client and dial timeouts, a read deadline), possibly wrapped by the SDK in a
// *smithy.OperationError. The call may or may not have taken effect.
func IsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// IsTransient reports whether err is a passing fault worth retrying unchanged after a backoff: throttling
// (IsThrottled), a server fault (IsServerFault) or a timeout (IsTimeout). Errors that are not transient
// (AccessDenied, ValidationError) keep failing until someone changes something.
func IsTransient(err error) bool {
	return err != nil && (IsThrottled(err) || IsServerFault(err) || IsTimeout(err))
}

// IsPassBudgetSpent reports whether err is the client-side limiter's ErrPassBudgetSpent: the request was not
// sent because its pass's time budget ran out (WithPassBudget). Not a fault: the step stopped before the call,
// as a crash there would stop it, and its target is looked at first in the next pass, without backoff.
func IsPassBudgetSpent(err error) bool { return errors.Is(err, ErrPassBudgetSpent) }

// IsResourceInUse reports whether err is EKS's ResourceInUseException: for UpdateNodegroupVersion, another
// update of the node group is in progress (Amazon EKS API Reference, UpdateNodegroupVersion, "Errors"). The
// caller waits and asks again; nothing was started.
func IsResourceInUse(err error) bool {
	code, _ := errorCode(err)
	return code == "ResourceInUseException"
}

// IsInvalidRequest reports whether err is EKS's InvalidParameterException or InvalidRequestException: the
// request cannot succeed as sent (a release version EKS does not know, a Kubernetes version for a node group
// of a custom AMI, a node group that is not ACTIVE). Retrying the same request does not help.
func IsInvalidRequest(err error) bool {
	code, _ := errorCode(err)
	return code == "InvalidParameterException" || code == "InvalidRequestException"
}
