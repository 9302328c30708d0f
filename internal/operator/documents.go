package operator

import (
	"encoding/json"
	"time"

	"github.com/patch-agent/patch-agent/internal/schema"
	"github.com/patch-agent/patch-agent/internal/state"
)

// SchemaVersion is the schemaVersion of the documents of status and history (schema.Version).
const SchemaVersion = schema.Version

// StatusDocument is the JSON of `patch-agent status -o json`: every managed group's row, sorted by group,
// [] (not null) when there is none.
type StatusDocument struct {
	SchemaVersion int         `json:"schemaVersion"`
	Groups        []StatusRow `json:"groups"`
}

// NewStatusDocument wraps rows (nil for none) in a StatusDocument of SchemaVersion.
func NewStatusDocument(rows []StatusRow) StatusDocument {
	if rows == nil {
		rows = []StatusRow{}
	}
	return StatusDocument{SchemaVersion: SchemaVersion, Groups: rows}
}

// HistoryDocument is the JSON of `patch-agent history GROUP -o json`: the group's entries, oldest first, []
// when there is none.
type HistoryDocument struct {
	SchemaVersion int            `json:"schemaVersion"`
	Group         string         `json:"group"`
	Entries       []HistoryEvent `json:"entries"`
}

// HistoryEvent is one history entry as `history -o json` prints it: the stored fields (previousImageId and
// newImageId as stored, "" when the event names none; sourceVersion 0 when there is no SSM parameter
// version) and fromImageId/toImageId, the direction the event moves the group (EventDirection).
type HistoryEvent struct {
	At              time.Time `json:"at"`
	Event           string    `json:"event"`
	FromImageID     string    `json:"fromImageId"`
	ToImageID       string    `json:"toImageId"`
	PreviousImageID string    `json:"previousImageId"`
	NewImageID      string    `json:"newImageId"`
	Source          string    `json:"source"`
	SourceVersion   int64     `json:"sourceVersion"`
	Detail          string    `json:"detail"`
}

// NewHistoryDocument converts group's entries into a HistoryDocument of SchemaVersion.
func NewHistoryDocument(group string, entries []state.HistoryEntry) HistoryDocument {
	d := HistoryDocument{SchemaVersion: SchemaVersion, Group: group, Entries: make([]HistoryEvent, 0, len(entries))}
	for _, e := range entries {
		from, to := EventDirection(e)
		d.Entries = append(d.Entries, HistoryEvent{At: e.At, Event: e.Event, FromImageID: from, ToImageID: to,
			PreviousImageID: e.PreviousImage, NewImageID: e.NewImage, Source: e.Source, SourceVersion: e.SourceVersion, Detail: e.Detail})
	}
	return d
}

// timeOrNull is t for JSON, nil (null) for the zero time: a time that is not set never prints as year 1.
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// MarshalJSON writes the row with every field present, the times not set as null.
func (r StatusRow) MarshalJSON() ([]byte, error) {
	type plain StatusRow // without the method
	return json.Marshal(struct {
		plain
		ChangedAt *time.Time `json:"changedAt"`
		UpdatedAt *time.Time `json:"updatedAt"`
	}{plain(r), timeOrNull(r.ChangedAt), timeOrNull(r.UpdatedAt)})
}

// MarshalJSON writes the pause with until null when it has no end.
func (p PauseInfo) MarshalJSON() ([]byte, error) {
	type plain PauseInfo
	return json.Marshal(struct {
		plain
		Since *time.Time `json:"since"`
		Until *time.Time `json:"until"`
	}{plain(p), timeOrNull(p.Since), timeOrNull(p.Until)})
}
