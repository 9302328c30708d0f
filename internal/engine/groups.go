package engine

import (
	"github.com/patch-agent/patch-agent/internal/providers"
)

// groups returns the Groups provider: o.Groups, or Auto Scaling itself when unset.
func (o *Orchestrator) groups() providers.Groups {
	if o.Groups != nil {
		return o.Groups
	}
	return providers.AutoScalingGroups{API: o.AutoScaling}
}
