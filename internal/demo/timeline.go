package demo

import (
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// gateOf names the gate that holds r: pause, approval, soak, window, alarm, AMI gate; "" when none.
func gateOf(r state.Rollout) string {
	reason := strings.ToLower(r.Reason)
	switch {
	case strings.HasPrefix(reason, "paused"):
		return "pause"
	case r.Phase != state.PhaseWaiting:
		return ""
	case strings.HasPrefix(reason, "approval"):
		return "approval"
	case strings.HasPrefix(reason, "soak"):
		return "soak"
	case strings.HasPrefix(reason, "maintenance window"):
		return "window"
	case strings.HasPrefix(reason, "alarm"):
		return "alarm"
	case strings.HasPrefix(reason, "ami refused"):
		return "AMI gate"
	}
	return "waiting"
}

// Geometry of the timeline, in SVG user units (pixels).
const (
	tlWidth   = 960
	tlLeft    = 60
	tlRight   = 20
	tlPanel   = 190 // one group's panel, its title included
	tlPlotTop = 30  // the plot's top within a panel
	tlPlot    = 130 // the plot's height
	tlHeader  = 60
)

// timelineSeries are the lines of each panel: what they count and how they are drawn.
var timelineSeries = []struct {
	label, color, dash string
	value              func(testworld.TimelineSample) int
}{
	{"desired", "#6b7280", "6 4", func(s testworld.TimelineSample) int { return s.Desired }},
	{"in service, healthy", "#16a34a", "", func(s testworld.TimelineSample) int { return s.Serving }},
	{"on target AMI", "#2563eb", "", func(s testworld.TimelineSample) int { return s.OnTarget }},
	{"draining", "#ea580c", "", func(s testworld.TimelineSample) int { return s.Draining }},
}

// WriteTimelineSVG draws s.Timeline as an SVG picture, one panel per group (sorted by name): over simulated
// time (x, minutes), the desired capacity, the instances in service and healthy, those on the target AMI
// and those draining (y, instances, as step lines), and the spans during which a gate held the rollout
// (shaded, labelled). The output depends only on s: the same demo draws the same bytes. Errors: no samples
// (the demo ran without Options.Timeline), or w's write error.
func WriteTimelineSVG(w io.Writer, s testworld.Summary) error {
	if len(s.Timeline) == 0 {
		return fmt.Errorf("no timeline samples: run the demo with Options.Timeline")
	}
	var groups []string
	byGroup := map[string][]testworld.TimelineSample{}
	var end time.Duration
	top := 1
	for _, x := range s.Timeline {
		if _, ok := byGroup[x.Group]; !ok {
			groups = append(groups, x.Group)
		}
		byGroup[x.Group] = append(byGroup[x.Group], x)
		end = max(end, x.At)
		top = max(top, x.Desired, x.Serving, x.OnTarget, x.Draining)
	}
	sort.Strings(groups)
	top++ // headroom above the highest line
	if end <= 0 {
		end = time.Second
	}
	height := tlHeader + len(groups)*tlPanel + 20
	plotW := float64(tlWidth - tlLeft - tlRight)
	xOf := func(d time.Duration) float64 { return tlLeft + plotW*float64(d)/float64(end) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		tlWidth, height, tlWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", tlWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="16" font-weight="bold">patch-agent demo --scenario %s: %d invariant violation(s), %s simulated</text>`+"\n",
		tlLeft, html.EscapeString(s.Scenario), s.InvariantViolations, end.Round(time.Second))
	lx := tlLeft
	for _, se := range timelineSeries {
		fmt.Fprintf(&b, `<line x1="%d" y1="40" x2="%d" y2="40" stroke="%s" stroke-width="2" stroke-dasharray="%s"/><text x="%d" y="44">%s</text>`+"\n",
			lx, lx+20, se.color, se.dash, lx+24, se.label)
		lx += 30 + 7*len(se.label)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="33" width="20" height="12" fill="#fecaca"/><text x="%d" y="44">a gate holds the rollout</text>`+"\n", lx, lx+24)

	for gi, group := range groups {
		samples := byGroup[group]
		y0 := float64(tlHeader + gi*tlPanel)
		plotTop, plotBottom := y0+tlPlotTop, y0+tlPlotTop+tlPlot
		yOf := func(n int) float64 { return plotBottom - tlPlot*float64(n)/float64(top) }
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-weight="bold">%s</text>`+"\n", tlLeft, y0+18, html.EscapeString(group))
		// gate spans
		for i := 0; i < len(samples); i++ {
			gate := samples[i].Gate
			if gate == "" {
				continue
			}
			j := i
			for j+1 < len(samples) && samples[j+1].Gate == gate {
				j++
			}
			x1, x2 := xOf(samples[i].At), xOf(samples[min(j+1, len(samples)-1)].At)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#fecaca"/><text x="%.1f" y="%.1f" fill="#991b1b">%s</text>`+"\n",
				x1, plotTop, max(x2-x1, 1), tlPlot, x1+3, plotTop+12, html.EscapeString(gate))
			i = j
		}
		// axes and grid
		for n := 0; n <= top; n++ {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e7eb"/><text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n",
				tlLeft, yOf(n), tlWidth-tlRight, yOf(n), tlLeft-6, yOf(n)+4, n)
		}
		step := tickStep(end)
		for t := time.Duration(0); t <= end; t += step {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%dm</text>`+"\n", xOf(t), plotBottom+16, int(t.Minutes()))
		}
		// series, as step lines
		for si, se := range timelineSeries {
			// A step line needs a point where the value changes (two: the old value and the new at that time) and
			// the last one; the points in between add nothing.
			var pts []string
			add := func(x, y float64) {
				p := fmt.Sprintf("%.1f,%.1f", x, y)
				if len(pts) == 0 || pts[len(pts)-1] != p {
					pts = append(pts, p)
				}
			}
			prev := -1
			for k, x := range samples {
				v := se.value(x)
				switch {
				case k == 0:
					add(xOf(x.At), yOf(v))
				case v != prev:
					add(xOf(x.At), yOf(prev))
					add(xOf(x.At), yOf(v))
				}
				prev = v
			}
			add(xOf(samples[len(samples)-1].At), yOf(prev))
			offset := float64(si) - 1.5 // keep equal lines apart by a pixel or two
			fmt.Fprintf(&b, `<polyline transform="translate(0 %.1f)" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s" points="%s"/>`+"\n",
				offset, se.color, se.dash, strings.Join(pts, " "))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// tickStep is the spacing of the time axis' labels: about ten over the run, in whole minutes.
func tickStep(end time.Duration) time.Duration {
	for _, m := range []time.Duration{1, 2, 5, 10, 15, 30, 60} {
		if end/(m*time.Minute) <= 12 {
			return m * time.Minute
		}
	}
	return 2 * time.Hour
}
