package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// checkDuplicateKeys fails when a JSON object anywhere in body names a member twice. RFC 8259 (section 4)
// leaves such a message's meaning to the reader: encoding/json keeps the last value, other readers the
// first, so {"LifecycleActionToken": A, ..., "LifecycleActionToken": B} could be read as one action by the
// agent and as another by whoever wrote or checked it. The agent treats such a body as malformed: never
// acted on, left for the dead-letter queue. body must be valid JSON (decode it first); the error names the
// member and where it is ("LifecycleActionToken" in "detail").
func checkDuplicateKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := kt.(string)
				// encoding/json matches member names to fields case-insensitively, so "EC2InstanceID" after
				// "EC2InstanceId" is the same member to the reader that acts on it, and so is "EC2InſtanceId"
				// (U+017F folds with s): fold before comparing, as encoding/json folds (foldName).
				folded := foldName(key)
				if seen[folded] {
					where := "the message"
					if path != "" {
						where = fmt.Sprintf("%q", path)
					}
					return fmt.Errorf("member %q appears twice in %s: a message must say each thing once", key, where)
				}
				seen[folded] = true
				if err := walk(key); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(path); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil
	}
	if err := walk(""); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
