package demo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/org"
)

// The organization demo's audit reads the instances and its status reads the rollout records: in every account
// both read, a group with a record has as many instances in both and as many outdated in the audit as are not
// yet on the target in status.
func TestOrganizationDemoAuditAndStatusCountTheSameInstances(t *testing.T) {
	ctx := context.Background()
	w, err := OrganizationWorld()
	require.NoError(t, err)
	accounts, err := org.ListAccounts(ctx, w.Org, []string{"ou-demo-workloads"})
	require.NoError(t, err)
	targets := org.Targets(accounts, []string{"us-east-1"})
	conn := w.Connector(OrgRole, "")
	type counts struct{ instances, outdated int }
	audited := map[string]counts{}
	for _, res := range org.Audit(ctx, org.Runner{}, conn, targets) {
		if res.Err != nil {
			continue
		}
		for _, g := range res.Value.Groups {
			audited[res.ID+"/"+g.Name] = counts{g.Instances, g.OutdatedInstances}
		}
	}
	compared := 0
	for _, res := range org.Status(ctx, org.Runner{}, conn, targets, org.DefaultDeployment, nil, fleet.Start) {
		if res.Err != nil {
			continue
		}
		for _, row := range res.Value {
			a, ok := audited[res.ID+"/"+row.Group]
			require.True(t, ok, "%s %s has a rollout record and no audit row", res.ID, row.Group)
			require.Equal(t, a, counts{row.Instances, row.Instances - row.OnTarget},
				"%s %s: audit's instances and outdated against status's instances and those not on the target", res.ID, row.Group)
			compared++
		}
	}
	require.Equal(t, 1, compared, "the search group's record")
}
