package lifecycle

import "time"

// NextAt returns when key is due again after its last failure; zero when no failure is recorded (it is due
// now). The agent's loop sets a timer on it so that a backed-off target is retried at its time, not at the
// next safety poll.
func (r *Retries) NextAt(key string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.keys[key]; ok {
		return k.next
	}
	return time.Time{}
}
