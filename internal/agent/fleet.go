package agent

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// fleetView is what the agent last learned of its fleet: the opted-in groups as last discovered, the AMI each
// AMI source names (or why it names none) and when the sources were last polled. Full passes, looks at a few
// targets, reactions to messages and the lifecycle sweep read and replace it beside each other; its lock is
// held only inside its methods, never across an AWS call.
type fleetView struct {
	mu         sync.Mutex
	discovered providers.Discovered
	amis       map[string]model.ResolvedAMI // by parameter name
	sourceErr  map[string]string            // parameter -> why it names no AMI (missing, invalid, deleted)
	lastPoll   time.Time                    // the last poll of every parameter that succeeded
}

// discovery returns the groups as last discovered (a full discovery with later looks merged in).
func (f *fleetView) discovery() providers.Discovered {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.discovered
}

// known reports whether a discovery found any opted-in group yet.
func (f *fleetView) known() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.discovered.Targets) > 0
}

// replace records a full discovery.
func (f *fleetView) replace(d providers.Discovered) {
	f.mu.Lock()
	f.discovered = d
	f.mu.Unlock()
}

// merge records the discovery of the named groups (d) into the latest discovery, which a pass beside the
// caller may have replaced since the caller read it, and returns the fleet as now known.
func (f *fleetView) merge(names []string, d providers.Discovered) providers.Discovered {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.discovered = f.discovered.Merge(names, d)
	return f.discovered
}

// parameters returns the AMI parameter of every managed target (a parameter once per target that names it).
func (f *fleetView) parameters() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for _, t := range f.discovered.Targets {
		names = append(names, t.Parameter)
	}
	return names
}

// source returns the AMI parameter names as last read (nil when unknown) and why it names none ("" when it
// does or nothing is known yet).
func (f *fleetView) source(param string) (*model.ResolvedAMI, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	problem := f.sourceErr[param]
	if r, ok := f.amis[param]; ok {
		return &r, problem
	}
	return nil, problem
}

// pollDue reports whether interval has passed at now since the last successful poll.
func (f *fleetView) pollDue(now time.Time, interval time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return now.Sub(f.lastPoll) >= interval
}

// polled records a successful poll of every parameter at at.
func (f *fleetView) polled(at time.Time) {
	f.mu.Lock()
	f.lastPoll = at
	f.mu.Unlock()
}

// resolved records what a read of parameters answered (providers.Resolver.Resolve): the AMI each found one
// names; for a missing or invalid one, why its groups have no source (the last known AMI is no longer what
// the source says, so nothing rolls on it). It logs every change of AMI and every problem.
func (f *fleetView) resolved(found map[string]model.ResolvedAMI, missing []string, invalid map[string]error, log *zap.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.amis == nil {
		f.amis, f.sourceErr = map[string]model.ResolvedAMI{}, map[string]string{}
	}
	for name, r := range found {
		if prev, ok := f.amis[name]; !ok || prev.ImageID != r.ImageID {
			log.Info("AMI parameter resolved", zap.String(logging.Parameter, name), zap.String(logging.AMI, r.ImageID),
				zap.Int64("parameter_version", r.Version))
		}
		f.amis[name] = r
		delete(f.sourceErr, name)
	}
	for _, name := range missing {
		delete(f.amis, name)
		f.sourceErr[name] = "source missing: parameter " + name + " does not exist"
		log.Warn("AMI parameter does not exist; no rollout for its groups", zap.String(logging.Parameter, name))
	}
	for name, err := range invalid {
		delete(f.amis, name)
		f.sourceErr[name] = "source missing: " + err.Error()
		log.Warn("AMI parameter does not name an AMI; no rollout for its groups", zap.String(logging.Parameter, name), zap.Error(err))
	}
}

// deleted records that parameter name was deleted: its groups have no source until it exists again.
func (f *fleetView) deleted(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sourceErr == nil {
		f.sourceErr = map[string]string{}
	}
	delete(f.amis, name)
	f.sourceErr[name] = "source missing: parameter " + name + " was deleted"
}

// targetsOf returns the targets whose AMI parameter is param (with or without its leading "/") and the
// parameter's name as those targets spell it.
func (f *fleetView) targetsOf(param string) (affected map[string]bool, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	affected, name = map[string]bool{}, param
	for _, t := range f.discovered.Targets {
		if t.Parameter == param || strings.TrimPrefix(t.Parameter, "/") == strings.TrimPrefix(param, "/") {
			affected[t.Group], name = true, t.Parameter
		}
	}
	return affected, name
}

// instanceImage is a cached DescribeInstances answer.
type instanceImage struct {
	imageID  string
	launched time.Time
	seen     time.Time
}

// imageCacheTTL bounds how long an instance's AMI is trusted without asking EC2 again (a root volume
// replacement gives a running instance a new AMI; its lifecycle action also evicts the entry at once).
const imageCacheTTL = 10 * time.Minute

// imageCache holds the AMI and launch time of each instance the agent looked at, by instance id: an
// instance's AMI only changes with a root volume replacement (forget).
type imageCache struct {
	mu      sync.Mutex
	entries map[string]instanceImage
}

// describeImages answers the AMI and launch time of each instance id (providers.ImageIDs).
type describeImages func(ctx context.Context, ids []string) (map[string]string, map[string]time.Time, error)

// lookup returns the AMI and launch time of every instance in live, asking describe only for those not seen
// within imageCacheTTL of now. A full look (full) forgets the cached instances live does not list: a look at a
// few groups lists only theirs.
func (c *imageCache) lookup(ctx context.Context, now time.Time, live map[string]bool, full bool, describe describeImages) (map[string]string, map[string]time.Time, error) {
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]instanceImage{}
	}
	var ask []string
	for id := range live {
		if e, ok := c.entries[id]; !ok || now.Sub(e.seen) > imageCacheTTL {
			ask = append(ask, id)
		}
	}
	c.mu.Unlock()
	if len(ask) > 0 {
		images, launched, err := describe(ctx, ask)
		if err != nil {
			return nil, nil, err
		}
		c.mu.Lock()
		for id, img := range images {
			c.entries[id] = instanceImage{imageID: img, launched: launched[id], seen: now}
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	images, launched := make(map[string]string, len(live)), make(map[string]time.Time, len(live))
	for id, e := range c.entries {
		if !live[id] {
			if full {
				delete(c.entries, id) // gone from every group: forget it
			}
			continue
		}
		images[id], launched[id] = e.imageID, e.launched
	}
	return images, launched, nil
}

// forget drops an instance's cached AMI (its root volume is being replaced).
func (c *imageCache) forget(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}

// size returns how many instances' AMIs the cache holds.
func (c *imageCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
