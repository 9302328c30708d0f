package operator

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A free-text cell written by whoever may write the table (a pause's reason and who, a history detail) reaches
// the operator's terminal as text: line breaks and tabs become spaces, other control characters their escapes.
func TestFreeTextCellsWriteNoControlCharacterToTheTerminal(t *testing.T) {
	require.Equal(t, `a b c\x1b[2Jd\r`, oneLine("a\nb\tc\x1b[2Jd\r"))
	require.Equal(t, `global by eve\x1b]0;x\a: why\u009b`, pauseCell(&PauseInfo{Scope: "global", Who: "eve\x1b]0;x\a", Reason: "why\u009b"}))
	require.Equal(t, "ünïcode — fine", oneLine("ünïcode — fine"))
}
