package org_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/org"
	"github.com/patch-agent/patch-agent/internal/org/orgsim"
	"github.com/patch-agent/patch-agent/internal/state"
)

const region = "us-east-1"

func id(n int) string { return fmt.Sprintf("1000000000%02d", n) }

func TestListAccountsReadsEveryPageOfTheOrganizationAndOfEachOU(t *testing.T) {
	w := orgsim.New(7)
	for n := 1; n <= 45; n++ {
		ou := "ou-root-apps"
		if n%3 == 0 {
			ou = "ou-root-data"
		}
		w.Org.AddAccount(id(n), fmt.Sprintf("acct-%d", n), ou)
	}
	w.Org.SuspendAccount(id(44))
	ctx := context.Background()

	all, err := org.ListAccounts(ctx, w.Org, nil)
	require.NoError(t, err)
	require.Len(t, all, 44, "every page, the suspended account left out")
	require.Equal(t, org.Account{ID: id(1), Name: "acct-1"}, all[0])
	require.Equal(t, 7, w.Org.Calls()["organizations:ListAccounts"], "45 accounts at 7 a page")

	data, err := org.ListAccounts(ctx, w.Org, []string{"ou-root-data"})
	require.NoError(t, err)
	require.Len(t, data, 15)
	both, err := org.ListAccounts(ctx, w.Org, []string{"ou-root-data", "ou-root-apps", "ou-root-data"})
	require.NoError(t, err)
	require.Equal(t, all, both, "two OUs together are the organization, each account once, sorted")

	_, err = org.ListAccounts(ctx, w.Org, []string{"ou-root-nope"})
	require.ErrorContains(t, err, "no such organizational unit")
}

func TestListAccountsOfAnOUIncludesItsChildOUsAtEveryDepth(t *testing.T) {
	w := orgsim.New(2)
	w.Org.AddOU("ou-root-workloads", "")
	for n := 1; n <= 5; n++ {
		// Five child OUs at two a page: the OU listing is paged too.
		w.Org.AddOU(fmt.Sprintf("ou-workloads-%d", n), "ou-root-workloads")
	}
	w.Org.AddOU("ou-workloads-3-deep", "ou-workloads-3")
	w.Org.AddAccount(id(1), "top", "ou-root-workloads")
	w.Org.AddAccount(id(2), "child-1", "ou-workloads-1")
	w.Org.AddAccount(id(3), "child-5", "ou-workloads-5")
	w.Org.AddAccount(id(4), "grandchild", "ou-workloads-3-deep")
	w.Org.AddAccount(id(5), "elsewhere", "ou-root-sandbox")
	ctx := context.Background()

	got, err := org.ListAccounts(ctx, w.Org, []string{"ou-root-workloads"})
	require.NoError(t, err)
	require.Equal(t, []org.Account{{ID: id(1), Name: "top"}, {ID: id(2), Name: "child-1"}, {ID: id(3), Name: "child-5"},
		{ID: id(4), Name: "grandchild"}}, got, "the OU, its children and theirs; not the sibling OU")

	got, err = org.ListAccounts(ctx, w.Org, []string{"ou-workloads-3"})
	require.NoError(t, err)
	require.Equal(t, []org.Account{{ID: id(4), Name: "grandchild"}}, got)
}

func TestListAccountsOutsideTheManagementAccountSaysWhereToRunIt(t *testing.T) {
	w := orgsim.New(20)
	w.Org.AddAccount(id(1), "a", "")
	w.Org.DenyOrganizations()
	_, err := org.ListAccounts(context.Background(), w.Org, nil)
	require.ErrorContains(t, err, "management account or a delegated administrator")
	require.ErrorContains(t, err, "--accounts FILE")
	require.ErrorContains(t, err, "StackSets with service-managed permissions do not deploy to the management account")
}

func TestParseAccounts(t *testing.T) {
	as, err := org.ParseAccounts(strings.NewReader("# platform accounts\n111122223333 prod eu\n\n444455556666\n"))
	require.NoError(t, err)
	require.Equal(t, []org.Account{{ID: "111122223333", Name: "prod eu"}, {ID: "444455556666"}}, as)
	_, err = org.ParseAccounts(strings.NewReader("111122223333\nprod 444455556666\n"))
	require.ErrorContains(t, err, `line 2: "prod" is not a 12-digit AWS account id`)
	_, err = org.ParseAccounts(strings.NewReader("# nothing\n"))
	require.ErrorContains(t, err, "no account")
}

func TestParseAccountsStripsCommentsAndTheByteOrderMarkAndRefusesDuplicates(t *testing.T) {
	as, err := org.ParseAccounts(strings.NewReader("\ufeff111122223333 prod # the payments team\n444455556666# no name\n  # indented comment\n"))
	require.NoError(t, err)
	require.Equal(t, []org.Account{{ID: "111122223333", Name: "prod"}, {ID: "444455556666"}}, as,
		"the mark before the first id and the comments are no part of an id or a name")

	_, err = org.ParseAccounts(strings.NewReader("# header\n111122223333 prod\n444455556666\n111122223333 production\n"))
	require.ErrorContains(t, err, "line 4: account 111122223333 is listed again (first on line 2)")
}

func TestTargetsRunARegionGivenTwiceOnce(t *testing.T) {
	ts := org.Targets([]org.Account{{ID: id(1)}, {ID: id(2)}}, []string{"eu-west-1", "us-east-1", "eu-west-1"})
	require.Equal(t, []org.Target{{Account: org.Account{ID: id(1)}, Region: "eu-west-1"}, {Account: org.Account{ID: id(1)}, Region: "us-east-1"},
		{Account: org.Account{ID: id(2)}, Region: "eu-west-1"}, {Account: org.Account{ID: id(2)}, Region: "us-east-1"}}, ts)
}

func TestCheckRoleNameRefusesARNsAndSlashesThatAreNoPath(t *testing.T) {
	for name, want := range map[string]string{"patch-agent-operator": "patch-agent-operator", "ops/patch-agent-operator": "ops/patch-agent-operator",
		"/ops/team/patch-agent-operator": "ops/team/patch-agent-operator"} {
		got, err := org.CheckRoleName(name)
		require.NoError(t, err, name)
		require.Equal(t, want, got)
	}
	_, err := org.CheckRoleName("arn:aws:iam::111122223333:role/patch-agent-operator")
	require.ErrorContains(t, err, "is an ARN: give the role's name")
	for _, bad := range []string{"ops//patch-agent-operator", "patch-agent-operator/", "/", "", "role name"} {
		_, err := org.CheckRoleName(bad)
		require.ErrorContains(t, err, "is not a role name", bad)
	}
}

// world builds members 1-3: 1 with a hard-coded AMI, 2 opted in, 3 with both; returns their targets.
func world(t *testing.T) (*orgsim.World, []org.Target) {
	w := orgsim.New(20)
	var targets []org.Target
	for n := 1; n <= 3; n++ {
		a := fleet.New()
		if n != 2 {
			require.NoError(t, fleet.AddHardCodedECS(a, fleet.Group{Name: "orders-ecs", Cluster: "orders", InstanceType: "m6i.large", Image: fleet.ECSx86.Image(2), Instances: 2}))
		}
		if n != 1 {
			require.NoError(t, fleet.AddPatchAgentECS(a, fleet.Group{Name: "search-ecs", Cluster: "search", InstanceType: "m7g.large", Image: fleet.ECSarm64.Image(6), Instances: 2}, fleet.ECSarm64.Parameter))
		}
		tg := org.Target{Account: org.Account{ID: id(n), Name: fmt.Sprintf("team-%d", n)}, Region: region}
		w.AddMember(tg, "", a, org.DefaultDeployment)
		targets = append(targets, tg)
	}
	return w, targets
}

func TestAuditReportsARefusedAndAHangingAccountAsRowsAndAuditsTheOthers(t *testing.T) {
	w, targets := world(t)
	// Two more accounts: one whose role cannot be assumed, one whose STS never answers.
	for n := 4; n <= 5; n++ {
		tg := org.Target{Account: org.Account{ID: id(n)}, Region: region}
		w.AddMember(tg, "", fleet.New(), org.DefaultDeployment)
		targets = append(targets, tg)
	}
	w.Org.RefuseAssumeRole(id(4), "no role patch-agent-operator")
	w.Org.HangAssumeRole(id(5))
	hang := []org.Target{targets[4]} // first, so that it holds a slot while the others run
	targets = append(hang, targets[:4]...)

	clk := testingclock.NewFakeClock(fleet.Start)
	answered := make(chan string, len(targets))
	r := org.Runner{Concurrency: 2, Timeout: 30 * time.Second, Clock: clk, Done: func(tg org.Target, _ error) { answered <- tg.ID }}
	done := make(chan []org.Result[*audit.Report])
	go func() { done <- org.Audit(context.Background(), r, w.Connector("patch-agent-operator", ""), targets) }()
	for range 4 {
		require.NotEqual(t, id(5), <-answered, "the hanging account answers only at its timeout")
	}
	for clk.Waiters() != 1 { // the hanging account's timer, the others' stopped
		select {
		case <-done:
			t.Fatal("the run ended before the hanging account's timeout")
		default:
		}
	}
	clk.Step(30 * time.Second)
	results := <-done

	rep := org.NewAuditReport(results, fleet.Start)
	require.Equal(t, 5, rep.Summary.Targets)
	require.Equal(t, 2, rep.Summary.Failed)
	byID := map[string]org.TargetResult{}
	for _, tr := range rep.Targets {
		byID[tr.ID] = tr
	}
	require.Contains(t, byID[id(4)].Error, "AccessDenied")
	require.Contains(t, byID[id(5)].Error, "no answer within 30s")
	require.Empty(t, byID[id(1)].Error)
	require.Equal(t, 4, rep.Summary.Groups, "1 + 1 + 2 groups; account 5 has none it could tell")
	require.Equal(t, 2, rep.Summary.HardCoded)
	require.Equal(t, []string{id(1) + " us-east-1 orders-ecs", id(3) + " us-east-1 orders-ecs"}, rep.BehindMoreThan(30*24*time.Hour))

	var js bytes.Buffer
	require.NoError(t, org.WriteAudit(&js, audit.FormatJSON, rep))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &doc))
	require.EqualValues(t, 1, doc["schemaVersion"])
	g := doc["groups"].([]any)[0].(map[string]any)
	require.Equal(t, id(1), g["account"])
	require.Equal(t, "team-1", g["accountName"])
	require.Equal(t, "us-east-1", g["region"])
	require.Equal(t, "orders-ecs", g["group"])
	require.Equal(t, "hard-coded", g["amiSource"])

	var csvOut, table bytes.Buffer
	require.NoError(t, org.WriteAudit(&csvOut, audit.FormatCSV, rep))
	lines := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
	require.True(t, strings.HasPrefix(lines[0], "account,account_name,region,error,group,"))
	require.Len(t, lines, 1+2+4, "header, the two failed targets, the four groups")
	require.NoError(t, org.WriteAudit(&table, audit.FormatTable, rep))
	require.Contains(t, table.String(), "3 of 5 account-regions audited")
	require.Contains(t, table.String(), "not audited (2):")
}

func TestAPartialPauseRunAgainPausesTheRestAndLeavesTheOthers(t *testing.T) {
	w, targets := world(t)
	w.Member(id(2), region).Store.FailNextWrites(1)
	c := w.Connector("patch-agent-operator", "")
	now := func() time.Time { return fleet.Start }
	req := org.PauseRequest{Reason: "incident 4711", Who: "alice"}
	ctx := context.Background()

	first := org.NewChangeDocument("pause", org.Pause(ctx, org.Runner{}, c, targets, org.DefaultDeployment, req, now))
	require.Equal(t, map[string]int{org.Paused: 2, "failed": 1}, first.Counts)
	require.Len(t, first.Failed(), 1)
	require.Equal(t, id(2), first.Failed()[0].ID)

	second := org.NewChangeDocument("pause", org.Pause(ctx, org.Runner{}, c, targets, org.DefaultDeployment, req, now))
	require.Equal(t, map[string]int{org.Paused: 1, org.AlreadyPaused: 2}, second.Counts)
	for _, tg := range targets {
		m := w.Member(tg.ID, region)
		locks, err := m.Store.ListLocks(ctx)
		require.NoError(t, err)
		require.Len(t, locks, 1)
		require.Equal(t, state.GlobalScope, locks[0].Group)
		require.Equal(t, "incident 4711", locks[0].Reason)
		visible, _ := m.Account.QueueDepth(m.Deployment.WakeUpQueueURL)
		require.Equal(t, 1, visible, "one wake-up per pause written, on the wake-up queue")
	}

	st := org.NewStatusDocument(org.Status(ctx, org.Runner{}, c, targets, org.DefaultDeployment, []string{org.OnlyHolding}, fleet.Start), []string{org.OnlyHolding})
	require.Empty(t, st.Failed())

	w.Member(id(3), region).Store.FailNextWrites(1)
	resumed := org.NewChangeDocument("resume", org.Resume(ctx, org.Runner{}, c, targets, org.DefaultDeployment, "alice", now))
	require.Equal(t, map[string]int{org.Resumed: 2, "failed": 1}, resumed.Counts)
	again := org.NewChangeDocument("resume", org.Resume(ctx, org.Runner{}, c, targets, org.DefaultDeployment, "alice", now))
	require.Equal(t, map[string]int{org.Resumed: 1, org.NotPaused: 2}, again.Counts)

	var table bytes.Buffer
	require.NoError(t, org.WriteChanges(&table, "table", again))
	require.Contains(t, table.String(), "resume in 3 account-regions: not-paused 2, resumed 1")
}

func TestStatusWithoutTheStackSaysWhereItLooked(t *testing.T) {
	w, targets := world(t)
	c := w.Connector("patch-agent-operator", "")
	res := org.Status(context.Background(), org.Runner{}, c, targets[:1], "other", nil, fleet.Start)
	require.ErrorContains(t, res[0].Err, "no SSM parameter /patch-agent/other/store")
}

func TestPauseAcrossAccountsRefusesToCallAShorterPauseInPlaceAlreadyPaused(t *testing.T) {
	w, targets := world(t)
	c := w.Connector("patch-agent-operator", "")
	ctx := context.Background()
	now := func() time.Time { return fleet.Start }
	// Account 1: paused for an hour; account 2: paused for a day; account 3: paused until resumed.
	for _, p := range []struct {
		account string
		until   time.Time
	}{{id(1), fleet.Start.Add(time.Hour)}, {id(2), fleet.Start.Add(24 * time.Hour)}, {id(3), time.Time{}}} {
		require.NoError(t, w.Member(p.account, region).Store.PutLock(ctx, state.Lock{Group: state.GlobalScope, Reason: "earlier",
			Who: "bob", Since: fleet.Start, Until: p.until}))
	}

	req := org.PauseRequest{Reason: "incident 4711", Who: "alice", Until: fleet.Start.Add(6 * time.Hour)}
	doc := org.NewChangeDocument("pause", org.Pause(ctx, org.Runner{}, c, targets, org.DefaultDeployment, req, now))
	require.Equal(t, map[string]int{org.PausedUntil: 1, org.AlreadyPaused: 2}, doc.Counts)
	require.Len(t, doc.Refused(), 1)
	require.Equal(t, id(1), doc.Refused()[0].ID)
	require.Contains(t, doc.Refused()[0].Detail, "run with --replace to extend")
	require.Contains(t, doc.Refused()[0].Detail, fleet.Start.Add(time.Hour).UTC().Format(time.RFC3339))

	req.Until = time.Time{}
	doc = org.NewChangeDocument("pause", org.Pause(ctx, org.Runner{}, c, targets, org.DefaultDeployment, req, now))
	require.Equal(t, map[string]int{org.PausedUntil: 2, org.AlreadyPaused: 1}, doc.Counts, "a pause without end outlasts every pause with one")

	req.Replace = true
	doc = org.NewChangeDocument("pause", org.Pause(ctx, org.Runner{}, c, targets, org.DefaultDeployment, req, now))
	require.Equal(t, map[string]int{org.Replaced: 3}, doc.Counts)
	require.Empty(t, doc.Refused())
}
