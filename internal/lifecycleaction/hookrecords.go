package lifecycleaction

import (
	"context"

	"github.com/patch-agent/patch-agent/internal/state"
)

// getHook returns the record of the lifecycle action under key: the one this process last read or wrote while
// it holds the action's claim with more than the lease margin left (state.LeaseRule.MayAct), else the store's
// (one strongly consistent GetItem). While that claim holds, no other replica writes the record (they
// respect it until its expiry plus the margin), so the kept copy is the stored one; a write on it that fails
// anyway (state.ErrConflict, an unknown outcome) drops it, and every write stays conditional on its version.
// Each look at an action in progress therefore reads no record, where it would otherwise cost a GetItem.
// Errors are the store's (state.ErrNotFound when there is none).
func (h *Hooks) getHook(ctx context.Context, key string) (state.Hook, error) {
	if rec, ok := h.Kept(key); ok {
		return rec, nil
	}
	rec, err := h.Store.GetHook(ctx, key)
	if err != nil {
		h.dropHook(key)
		return rec, err
	}
	h.keepHook(rec)
	return rec, nil
}

// Kept returns the record of the lifecycle action under key that this process keeps, when it holds the
// action's claim with more than the lease margin left (state.LeaseRule.MayAct): the stored record, since no other
// replica writes it while that claim holds (getHook). False when it keeps none or its claim is within the
// margin: read the store. Safe for concurrent use.
func (h *Hooks) Kept(key string) (state.Hook, bool) {
	h.mu.Lock()
	rec, ok := h.kept[key]
	h.mu.Unlock()
	if !ok || !h.leases().MayAct(rec.Lease(), h.Owner, h.Clock.Now()) {
		return state.Hook{}, false
	}
	return rec, true
}

// putHook writes rec (state.Store.PutHook, conditional on rec.Version) and keeps the record as stored for
// getHook; a failed write drops the kept one, so the next look reads the store.
func (h *Hooks) putHook(ctx context.Context, rec state.Hook) (state.Hook, error) {
	stored, err := h.Store.PutHook(ctx, rec)
	if err != nil {
		h.dropHook(rec.Token)
		return stored, err
	}
	h.keepHook(stored)
	return stored, nil
}

// keepHook keeps rec when this replica holds its claim, and forgets any other record of its key.
func (h *Hooks) keepHook(rec state.Hook) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec.Owner != h.Owner || rec.Owner == "" {
		delete(h.kept, rec.Token)
		return
	}
	if h.kept == nil {
		h.kept = map[string]state.Hook{}
	}
	h.kept[rec.Token] = rec
	h.pruneLocked()
}

// dropHook forgets the kept record of key.
func (h *Hooks) dropHook(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.kept, key)
}
