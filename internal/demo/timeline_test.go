package demo

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/stretchr/testify/require"
)

// svgElements counts the elements of an SVG document by name and collects its texts; it fails on XML that
// does not parse.
func svgElements(t *testing.T, b []byte) (map[string]int, []string) {
	t.Helper()
	counts := map[string]int{}
	var texts []string
	dec := xml.NewDecoder(bytes.NewReader(b))
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch e := tok.(type) {
		case xml.StartElement:
			counts[e.Name.Local]++
			inText = e.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(e))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return counts, texts
}

// The timeline draws a panel per group with its four lines, and shades the spans a gate held the rollout,
// named by the gate; the same demo draws the same bytes.
func TestTimelineSVGDrawsEachGroupAndTheGatesThatHeld(t *testing.T) {
	for _, c := range []struct {
		scenario string
		gate     string // a gate label the picture must show ("" none)
	}{
		{"rollout", ""},
		{"pause", "pause"},
		{"approval", "approval"},
		{"alarm-gate", "alarm"},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			draw := func() []byte {
				s, err := Run(context.Background(), Options{Scenario: c.scenario, Timeline: true})
				require.NoError(t, err)
				require.NotEmpty(t, s.Timeline)
				var b bytes.Buffer
				require.NoError(t, WriteTimelineSVG(&b, s))
				return b.Bytes()
			}
			svg := draw()
			require.Equal(t, string(svg), string(draw()), "deterministic")
			counts, texts := svgElements(t, svg)
			require.Equal(t, 2*len(timelineSeries), counts["polyline"], "four lines for each of the two groups")
			joined := strings.Join(texts, "|")
			require.Contains(t, joined, testworld.GroupName)
			require.Contains(t, joined, testworld.EKSGroupName)
			require.Contains(t, joined, "0 invariant violation(s)")
			if c.gate != "" {
				require.Contains(t, texts, c.gate)
			} else {
				for _, g := range []string{"pause", "approval", "alarm", "soak", "window"} {
					require.NotContains(t, texts, g, "no gate held the plain rollout")
				}
			}
		})
	}
	require.Error(t, WriteTimelineSVG(io.Discard, testworld.Summary{}), "a demo run without Options.Timeline has nothing to draw")
}

// While a gate holds, nothing changes: the samples of a gate span keep serving at desired and draining at 0.
func TestTimelineSamplesHoldStillWhileTheApprovalGateHolds(t *testing.T) {
	s, err := Run(context.Background(), Options{Scenario: "approval", Timeline: true})
	require.NoError(t, err)
	held := 0
	for _, x := range s.Timeline {
		if x.Gate != "approval" {
			continue
		}
		held++
		require.Zero(t, x.Draining, "%s at %s", x.Group, x.At)
		require.Equal(t, x.Desired, x.Serving, "%s at %s", x.Group, x.At)
		require.Zero(t, x.OnTarget, "%s at %s: nothing replaced before the approval", x.Group, x.At)
	}
	require.Positive(t, held)
}
