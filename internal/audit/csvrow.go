package audit

import (
	"strconv"
	"strings"
)

// CSVHeader returns the CSV columns of one group (the header of `audit -o csv`), for reports that add
// columns of their own before them (the organization-wide audit: account, account name, region).
func CSVHeader() []string { return append([]string(nil), csvHeader...) }

// CSVRow returns the CSV record of g, in the columns of CSVHeader: the row `audit -o csv` writes for it.
func CSVRow(g Group) []string {
	return []string{g.Name, g.Platform, g.Cluster, g.ClusterFrom, g.Nodegroup, g.AMISource, g.LaunchTemplate,
		g.LaunchConfiguration, g.ConfiguredImage, g.LaunchImageID, g.Architecture, strings.Join(g.InstanceTypes, " "),
		strconv.Itoa(g.Instances), strconv.Itoa(g.OutdatedInstances), inUse(g.InUse), g.OldestImageID,
		g.RecommendedParameter, g.RecommendedImageID, dayOf(g.RecommendedReleased), formatCount(g.DaysBehind),
		formatCount(g.ReleasesBehind), g.Status, strings.Join(g.Notes, "; ")}
}

// FormatCount writes DaysBehind or ReleasesBehind as the table and the CSV do ("unknown" for Unknown).
func FormatCount(n int) string { return formatCount(n) }
