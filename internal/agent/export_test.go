package agent

// OnTargetWait makes the agent call f each time a goroutine has to wait for a target another goroutine is
// advancing (pool.go, targetGuard): tests use it to see the guard at work.
func (a *Agent) OnTargetWait(f func(target string)) {
	a.targets.mu.Lock()
	a.targets.onWait = f
	a.targets.mu.Unlock()
}

// CachedImages returns how many instances' AMIs the agent holds (imageCache).
func (a *Agent) CachedImages() int { return a.images.size() }
