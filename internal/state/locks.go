package state

import "time"

// GlobalScope is the Lock scope that pauses every target.
const GlobalScope = ""

// Lock is a pause: the global lock (Group == GlobalScope) stops every new destructive step of every target,
// a target lock stops those of one group. Draining for lifecycle TERMINATING actions goes on while paused
// (it protects workloads); no instance refresh starts or goes on, no launch template version is made.
type Lock struct {
	Group  string    `json:"group,omitempty" dynamodbav:"group,omitempty"` // GlobalScope for the global lock
	Reason string    `json:"reason" dynamodbav:"reason"`
	Who    string    `json:"who" dynamodbav:"who"`
	Since  time.Time `json:"since" dynamodbav:"since"`
	// Until, when set, ends the pause by itself at that time.
	Until time.Time `json:"until,omitempty" dynamodbav:"until,omitempty"`
}

// Active reports whether the lock holds at now.
func (l Lock) Active(now time.Time) bool { return l.Until.IsZero() || now.Before(l.Until) }

// Scope names the lock's scope for messages: "global" or "group G".
func (l Lock) Scope() string {
	if l.Group == GlobalScope {
		return "global"
	}
	return "group " + l.Group
}
