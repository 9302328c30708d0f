package sim

import (
	"runtime"
	"sync"
	"weak"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// inventory holds the resources of the account that only `patch-agent audit` reads: launch configurations
// (launchconfig.go), registered AMIs (images.go) and EKS managed node groups (eksnodegroups.go). Like the
// recordings of observability.go it lives beside the Account (keyed by a weak pointer, dropped with the
// account) and is guarded by the account's lock.
type inventory struct {
	launchConfigs map[string]*launchConfiguration // by name
	lcOrder       []string
	// lcGroups binds a group created on a launch configuration to it, by group name.
	lcGroups map[string]*launchConfiguration

	images     map[string]*image // by image id
	imageOrder []string

	nodegroups map[string]map[string]*nodegroup // EKS cluster name -> node group name -> node group
}

var inventoryByAccount sync.Map // weak.Pointer[Account] -> *inventory

// inventoryLocked returns the account's inventory, creating it on first use. Callers hold a.mu.
func (a *Account) inventoryLocked() *inventory {
	if inv := a.peekInventoryLocked(); inv != nil {
		return inv
	}
	key := weak.Make(a)
	inv := &inventory{
		launchConfigs: map[string]*launchConfiguration{},
		lcGroups:      map[string]*launchConfiguration{},
		images:        map[string]*image{},
		nodegroups:    map[string]map[string]*nodegroup{},
	}
	inventoryByAccount.Store(key, inv)
	runtime.AddCleanup(a, func(k weak.Pointer[Account]) { inventoryByAccount.Delete(k) }, key)
	return inv
}

// peekInventoryLocked returns the account's inventory, or nil when nothing was ever put in it. Callers hold
// a.mu.
func (a *Account) peekInventoryLocked() *inventory {
	if v, ok := inventoryByAccount.Load(weak.Make(a)); ok {
		return v.(*inventory)
	}
	return nil
}

// ReadOnlyAutoScaling returns the account's Auto Scaling API as `patch-agent audit` uses it.
func (a *Account) ReadOnlyAutoScaling() awsapi.ReadOnlyAutoScaling { return &AutoScalingClient{a: a} }

// ReadOnlyEC2 returns the account's EC2 API as `patch-agent audit` uses it.
func (a *Account) ReadOnlyEC2() awsapi.ReadOnlyEC2 { return &EC2Client{a: a} }

// ReadOnlyECS returns the account's ECS API as `patch-agent audit` uses it.
func (a *Account) ReadOnlyECS() awsapi.ReadOnlyECS { return &ECSClient{a: a} }

// ReadOnlyEKS returns the account's EKS API as `patch-agent audit` uses it.
func (a *Account) ReadOnlyEKS() awsapi.ReadOnlyEKS { return &EKSClient{a: a} }

// ReadOnlySSM returns the account's Parameter Store API as `patch-agent audit` uses it.
func (a *Account) ReadOnlySSM() awsapi.ReadOnlySSM { return &SSMClient{a: a} }

var (
	_ awsapi.ReadOnlyAutoScaling = (*AutoScalingClient)(nil)
	_ awsapi.ReadOnlyEC2         = (*EC2Client)(nil)
	_ awsapi.ReadOnlyECS         = (*ECSClient)(nil)
	_ awsapi.ReadOnlyEKS         = (*EKSClient)(nil)
	_ awsapi.ReadOnlySSM         = (*SSMClient)(nil)
	_ awsapi.MetricData          = (*CloudWatchClient)(nil)
)
