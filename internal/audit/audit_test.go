package audit_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// readOnlyCall matches the operations an audit may make (sim.Account.Calls keys).
var readOnlyCall = regexp.MustCompile(`^[a-z0-9]+:(Describe|List|Get)[A-Za-z]+$`)

// kinds builds one fleet per kind of group the audit tells apart.
var kinds = []struct {
	name  string
	build func(t *testing.T, a *sim.Account)
}{
	{"hard-coded", func(t *testing.T, a *sim.Account) {
		require.NoError(t, fleet.AddHardCodedECS(a, fleet.Group{Name: "orders", Cluster: "orders", InstanceType: "m6i.large", Image: fleet.ECSx86.Image(2), Instances: 2}))
	}},
	{"resolve-ssm", func(t *testing.T, a *sim.Account) {
		require.NoError(t, fleet.AddResolveSSMECS(a, fleet.Group{Name: "payments", Cluster: "payments", InstanceType: "m7g.large", Image: fleet.ECSarm64.Image(4), Instances: 2}, fleet.ECSarm64.ImageIDParameter))
		require.NoError(t, a.SetDesiredCapacity("payments", 3)) // the third instance resolves the parameter at launch
		a.Advance(2 * time.Minute)
	}},
	{"patch-agent", func(t *testing.T, a *sim.Account) {
		require.NoError(t, fleet.AddPatchAgentECS(a, fleet.Group{Name: "search", Cluster: "search", InstanceType: "c7g.large", Image: fleet.ECSarm64.Image(6), Instances: 2}, fleet.ECSarm64.Parameter))
	}},
	{"launch-configuration", func(t *testing.T, a *sim.Account) {
		require.NoError(t, fleet.AddLaunchConfigurationECS(a, fleet.Group{Name: "legacy", Cluster: "legacy", InstanceType: "t3.large", Image: fleet.Legacy, Instances: 1}))
	}},
	{"eks-managed", func(t *testing.T, a *sim.Account) {
		_, err := fleet.AddManagedNodegroup(a, fleet.Group{Name: "web", InstanceType: "m7g.large", Instances: 2}, "AL2023_ARM_64_STANDARD", fleet.EKSarm64, 5)
		require.NoError(t, err)
	}},
	{"eks-self-managed", func(t *testing.T, a *sim.Account) {
		require.NoError(t, fleet.AddSelfManagedEKS(a, fleet.Group{Name: "batch", InstanceType: "c6i.xlarge", Image: fleet.EKSx86.Image(3), Instances: 1}))
	}},
	{"unknown-platform", func(t *testing.T, a *sim.Account) {
		require.NoError(t, fleet.AddUntagged(a, fleet.Group{Name: "bastion", InstanceType: "t3.medium", Image: fleet.ECSx86.Image(1), Instances: 1}))
	}},
}

func TestReportOfEachKindOfGroupMatchesTheGoldenFiles(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := fleet.New()
			k.build(t, a)
			a.ResetCalls()
			r, err := fleet.Auditor(a).Run(context.Background())
			require.NoError(t, err)
			for _, format := range audit.Formats() {
				var buf bytes.Buffer
				require.NoError(t, audit.Write(&buf, format, r))
				golden(t, filepath.Join("testdata", k.name+"."+format+".golden"), buf.Bytes())
			}
			for op := range a.Calls() {
				require.Regexp(t, readOnlyCall, op, "the audit only reads")
			}
		})
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/audit -update to create it")
	require.Equal(t, string(want), string(got), "%s differs; run go test ./internal/audit -update after checking the change", path)
}

func TestGroupsAreListed100PerCall(t *testing.T) {
	a := fleet.New()
	for i := range 150 {
		require.NoError(t, fleet.AddUntagged(a, fleet.Group{Name: "g" + time.Duration(i).String(), InstanceType: "t3.medium", Image: fleet.ECSx86.Image(1)}))
	}
	a.ResetCalls()
	r, err := fleet.Auditor(a).Run(context.Background())
	require.NoError(t, err)
	require.Len(t, r.Groups, 150)
	require.Equal(t, 2, a.Calls()["autoscaling:DescribeAutoScalingGroups"])
	require.Equal(t, 150, r.Summary.Empty+r.Summary.Unknown)
}

func TestAMIThatEC2NoLongerKnowsIsBehindByUnknownDaysAndReleases(t *testing.T) {
	a := fleet.New()
	require.NoError(t, fleet.AddSelfManagedEKS(a, fleet.Group{Name: "batch", InstanceType: "c6i.xlarge", Image: "ami-0dead00000000beef", Instances: 1}))
	r, err := fleet.Auditor(a).Run(context.Background())
	require.NoError(t, err)
	g := r.Groups[0]
	require.Equal(t, audit.StatusBehind, g.Status)
	require.Equal(t, 1, g.OutdatedInstances)
	require.Equal(t, audit.Unknown, g.DaysBehind)
	require.Equal(t, audit.Unknown, g.ReleasesBehind)
	require.Nil(t, g.InUse[0].Created)
	require.Empty(t, r.BehindMoreThan(0), "unknown is never more than a threshold")
}

func TestMixedGroupCountsOnlyInstancesOnOlderAMIs(t *testing.T) {
	a := fleet.New()
	kinds[1].build(t, a) // resolve-ssm: two instances on release 4, one on release 6
	r, err := fleet.Auditor(a).Run(context.Background())
	require.NoError(t, err)
	g := r.Groups[0]
	require.Equal(t, 3, g.Instances)
	require.Equal(t, 2, g.OutdatedInstances)
	require.Equal(t, fleet.ECSarm64.Image(4), g.OldestImageID)
	require.Equal(t, 2, g.ReleasesBehind)
	require.Equal(t, int(fleet.Created(6).Sub(fleet.Created(4)).Hours()/24), g.DaysBehind)
}

func TestBehindMoreThanComparesTheAgeOfTheOldestOutdatedAMI(t *testing.T) {
	a := fleet.New()
	kinds[0].build(t, a) // hard-coded on release 2: 133 days behind release 6
	r, err := fleet.Auditor(a).Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, 133, r.Groups[0].DaysBehind)
	require.Equal(t, []string{"orders"}, r.BehindMoreThan(90*24*time.Hour))
	require.Empty(t, r.BehindMoreThan(134*24*time.Hour))
}

func TestPublishMetricsSendsOutdatedInstancesAndDaysBehindPerGroup(t *testing.T) {
	a := fleet.New()
	kinds[0].build(t, a)
	kinds[6].build(t, a) // unknown platform: no metric
	r, err := fleet.Auditor(a).Run(context.Background())
	require.NoError(t, err)
	n, err := audit.PublishMetrics(context.Background(), a.CloudWatch(), r)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got := map[string]float64{}
	for _, m := range a.PublishedMetrics() {
		require.Equal(t, audit.MetricsNamespace, m.Namespace)
		require.Equal(t, map[string]string{audit.DimensionGroup: "orders"}, m.Dimensions)
		got[m.Name] = m.Value
	}
	require.Equal(t, map[string]float64{audit.MetricOutdatedInstances: 2, audit.MetricDaysBehind: 133}, got)
}

// deniedECS answers every ECS call with AccessDeniedException.
type deniedECS struct{ awsapi.ReadOnlyECS }

var errDenied = &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform: ecs:ListClusters"}

func (deniedECS) ListClusters(context.Context, *ecs.ListClustersInput, ...func(*ecs.Options)) (*ecs.ListClustersOutput, error) {
	return nil, errDenied
}

func TestECSReadsThatFailBecomeAWarningAndTagsStillCount(t *testing.T) {
	a := fleet.New()
	kinds[0].build(t, a) // found by its capacity provider only
	kinds[3].build(t, a) // found by its tags
	au := fleet.Auditor(a)
	au.ECS = deniedECS{au.ECS}
	r, err := au.Run(context.Background())
	require.NoError(t, err)
	require.Len(t, r.Warnings, 1)
	require.Contains(t, r.Warnings[0], "AccessDeniedException")
	byName := map[string]audit.Group{}
	for _, g := range r.Groups {
		byName[g.Name] = g
	}
	require.Equal(t, audit.PlatformUnknown, byName["orders"].Platform)
	require.Equal(t, audit.PlatformECS, byName["legacy"].Platform)
}

func TestAuditStopsWhenTheGroupsCannotBeListed(t *testing.T) {
	a := fleet.New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := fleet.Auditor(a).Run(ctx)
	require.True(t, errors.Is(err, context.Canceled), err)
}

func TestParseAge(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30d", 30 * 24 * time.Hour, false},
		{"0d", 0, false},
		{"720h", 720 * time.Hour, false},
		{"36h30m", 36*time.Hour + 30*time.Minute, false},
		{"", 0, true},
		{"thirty", 0, true},
		{"1.5d", 0, true},
		{"-2d", 0, true},
		{"-1h", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := audit.ParseAge(tc.in)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestCheckFormat(t *testing.T) {
	for _, f := range audit.Formats() {
		require.NoError(t, audit.CheckFormat(f))
	}
	require.EqualError(t, audit.CheckFormat("yaml"), `--output "yaml": want table, json, csv`)
}

// An opted-in group without the agent's lifecycle hooks is one the agent will not roll by instance refresh: the
// audit says so before an upgrade finds it, with the command that adds each hook; so is a group tagged with an
// older agent's strategy (surge), which rolls by instance refresh too; a group with both hooks gets no such note.
func TestAuditNotesOptedInGroupsTheAgentWillNotRollForWantOfHooks(t *testing.T) {
	a := fleet.New()
	g := func(name string) fleet.Group {
		return fleet.Group{Name: name, Cluster: name, InstanceType: "c7g.large", Image: fleet.ECSarm64.Image(6), Instances: 1}
	}
	require.NoError(t, fleet.AddPatchAgentECSWithoutHooks(a, g("bare"), fleet.ECSarm64.Parameter))
	require.NoError(t, fleet.AddPatchAgentECS(a, g("hooked"), fleet.ECSarm64.Parameter))
	require.NoError(t, fleet.AddPatchAgentECSWithoutHooks(a, g("surged"), fleet.ECSarm64.Parameter))
	require.NoError(t, a.SetGroupTag("surged", model.TagStrategy, "surge"))
	r, err := fleet.Auditor(a).Run(context.Background())
	require.NoError(t, err)
	notes := map[string]string{}
	for _, grp := range r.Groups {
		notes[grp.Name] = strings.Join(grp.Notes, "; ")
	}
	require.Contains(t, notes["bare"], "not rolled until fixed: instance refresh needs the agent's lifecycle hooks")
	require.Contains(t, notes["bare"], "aws autoscaling put-lifecycle-hook --auto-scaling-group-name bare --lifecycle-hook-name patch-agent-launch")
	require.NotContains(t, notes["hooked"], "lifecycle hook")
	require.Contains(t, notes["surged"], "not rolled until fixed: instance refresh needs the agent's lifecycle hooks")
	require.Contains(t, notes["surged"], "--auto-scaling-group-name surged --lifecycle-hook-name patch-agent-drain")
}
