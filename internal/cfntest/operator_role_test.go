package cfntest

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/org"
	"github.com/patch-agent/patch-agent/internal/state"
)

// operatorRolePath is the member accounts' operator role template.
const operatorRolePath = "../../cloudformation/operator-role.yaml"

const trustedAccount = "210987654321"

// operatorServiceOf maps the interfaces of the organization-wide commands (internal/org, internal/cli/orgcmd
// organization.go) to IAM service prefixes: every method is an action the operator role must allow, and it
// may allow nothing else. MetricData (audit --publish-metrics) is not among them: the organization-wide audit
// publishes no metrics.
var operatorServiceOf = map[reflect.Type]string{
	reflect.TypeFor[awsapi.ReadOnlyAutoScaling](): "autoscaling",
	reflect.TypeFor[awsapi.ReadOnlyEC2]():         "ec2",
	reflect.TypeFor[awsapi.ReadOnlyECS]():         "ecs",
	reflect.TypeFor[awsapi.ReadOnlyEKS]():         "eks",
	reflect.TypeFor[awsapi.ReadOnlySSM]():         "ssm",
	reflect.TypeFor[awsapi.OperatorDynamoDB]():    "dynamodb",
	reflect.TypeFor[awsapi.OperatorQueue]():       "sqs",
}

func operatorCalls() []string {
	var out []string
	for typ, service := range operatorServiceOf {
		for i := range typ.NumMethod() {
			out = append(out, service+":"+typ.Method(i).Name)
		}
	}
	sort.Strings(out)
	return out
}

func loadOperatorRole(t testing.TB, params map[string]string) *stack {
	t.Helper()
	given := map[string]string{"TrustedAccountId": trustedAccount}
	for k, v := range params {
		given[k] = v
	}
	return loadStackFrom(t, operatorRolePath, given)
}

func TestOperatorRoleAllowsExactlyTheCallsOfTheOrganizationWideCommands(t *testing.T) {
	s := loadOperatorRole(t, nil)
	var allowed []string
	seen := map[string]bool{}
	for _, st := range s.roleStatements(t, "OperatorRole") {
		if st.effect == "Deny" {
			continue // TestOperatorRoleCannotDecryptParameters
		}
		require.Equal(t, "Allow", st.effect, st.where)
		require.False(t, st.notAction || st.notResource, st.where)
		for _, a := range st.actions {
			require.NotContains(t, a, "*", "%s: list the actions", st.where)
			if !seen[a] {
				seen[a] = true
				allowed = append(allowed, a)
			}
			// Every write is scoped to this account's resources, never "*".
			if !readOnly(a) {
				for _, r := range st.resources {
					require.NotEqual(t, "*", r, "%s: %s on every resource", st.where, a)
					require.Contains(t, r, ":"+testAccount+":", "%s: %s outside this account", st.where, a)
				}
			}
		}
	}
	sort.Strings(allowed)
	require.Equal(t, operatorCalls(), allowed)
}

func TestOperatorRoleCannotDecryptParameters(t *testing.T) {
	for _, params := range []map[string]string{nil, {"KmsKeyArn": "arn:aws:kms:us-east-1:" + testAccount + ":key/1234abcd-12ab-34cd-56ef-1234567890ab"}} {
		denied := false
		for _, st := range loadOperatorRole(t, params).roleStatements(t, "OperatorRole") {
			if st.effect != "Deny" {
				continue
			}
			if slicesContain(st.actions, "kms:Decrypt") && slicesContain(st.resources, "*") &&
				slicesContain(st.conditions["StringLike"]["kms:ViaService"], "ssm.*.amazonaws.com") && len(st.conditions) == 1 {
				denied = true
			}
		}
		require.True(t, denied, "%v: an explicit Deny of kms:Decrypt via SSM on every key, so ssm:GetParameters cannot read SecureString values", params)
	}
}

func TestOperatorRoleUsesTheAgentStacksKeyOnlyThroughTheTableAndTheQueue(t *testing.T) {
	key := "arn:aws:kms:us-east-1:" + testAccount + ":key/1234abcd-12ab-34cd-56ef-1234567890ab"
	for _, st := range loadOperatorRole(t, nil).roleStatements(t, "OperatorRole") {
		for _, a := range st.actions {
			require.False(t, st.effect == "Allow" && strings.HasPrefix(a, "kms:"), "%s: no key without KmsKeyArn", st.where)
		}
	}
	var kms []statement
	for _, st := range loadOperatorRole(t, map[string]string{"KmsKeyArn": key}).roleStatements(t, "OperatorRole") {
		if st.effect == "Allow" && slicesContain(st.actions, "kms:Decrypt") {
			kms = append(kms, st)
		}
	}
	require.Len(t, kms, 1)
	require.ElementsMatch(t, []string{"kms:Decrypt", "kms:GenerateDataKey"}, kms[0].actions)
	require.Equal(t, []string{key}, kms[0].resources)
	require.ElementsMatch(t, []string{"dynamodb.*.amazonaws.com", "sqs.*.amazonaws.com"}, kms[0].conditions["StringLike"]["kms:ViaService"])
	require.Len(t, kms[0].conditions, 1)
}

func TestOperatorRoleWritesOnlyTheGlobalPauseLock(t *testing.T) {
	s := loadOperatorRole(t, nil)
	pk, _ := state.LockKey(state.GlobalScope)
	writes := 0
	for _, st := range s.roleStatements(t, "OperatorRole") {
		for _, a := range st.actions {
			if a != "dynamodb:GetItem" && a != "dynamodb:PutItem" && a != "dynamodb:DeleteItem" {
				continue
			}
			writes++
			require.Equal(t, []string{pk}, st.conditions["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"],
				"%s: %s only on the global pause lock's partition key", st.where, a)
		}
		if slicesContain(st.actions, "dynamodb:Query") {
			require.Equal(t, []string{"arn:aws:dynamodb:*:" + testAccount + ":table/*/index/" + state.IndexKind}, st.resources,
				"the commands read rollouts and locks through the index only")
		}
	}
	require.Equal(t, 3, writes, "GetItem, PutItem and DeleteItem of the lock")
}

func slicesContain(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// trustStatement returns the role's one trust statement.
func trustStatement(t *testing.T, s *stack) statement {
	r, err := s.tpl.GetIAMRoleWithName("OperatorRole")
	require.NoError(t, err)
	sts := parseStatements(t, "OperatorRole trust", r.AssumeRolePolicyDocument)
	require.Len(t, sts, 1)
	return sts[0]
}

func TestOperatorRoleTrustsTheNamedAccountWithItsExternalId(t *testing.T) {
	plain := trustStatement(t, loadOperatorRole(t, nil))
	require.Equal(t, []string{"sts:AssumeRole"}, plain.actions)
	require.Equal(t, map[string]any{"AWS": "arn:aws:iam::" + trustedAccount + ":root"}, plain.principal)
	require.NotContains(t, plain.conditions, "StringEquals", "no external id asked for")
	require.Equal(t, []string{"arn:aws:iam::" + trustedAccount + ":*"}, plain.conditions["ArnLike"]["aws:PrincipalArn"])

	strict := trustStatement(t, loadOperatorRole(t, map[string]string{"ExternalId": "patch-agent-7f3a", "TrustedRoleNames": "platform-operator,AWSReservedSSO_PlatformAdmin_*"}))
	require.Equal(t, []string{"patch-agent-7f3a"}, strict.conditions["StringEquals"]["sts:ExternalId"])
	require.ElementsMatch(t, []string{
		"arn:aws:iam::" + trustedAccount + ":role/platform-operator", "arn:aws:iam::" + trustedAccount + ":role/AWSReservedSSO_PlatformAdmin_*",
		"arn:aws:iam::" + trustedAccount + ":role/*/platform-operator", "arn:aws:iam::" + trustedAccount + ":role/*/AWSReservedSSO_PlatformAdmin_*",
	}, strict.conditions["ArnLike"]["aws:PrincipalArn"])
}

// The operator role is deployed by a service-managed StackSet to every account of an OU: only the trusted
// account needs a value, the same one everywhere.
func TestOperatorRoleDeploysToEveryAccountWithoutPerAccountValues(t *testing.T) {
	raw := rawTemplateAt(t, operatorRolePath)
	params, _ := raw["Parameters"].(map[string]any)
	var noDefault []string
	for name, v := range params {
		p, _ := v.(map[string]any)
		typ, _ := p["Type"].(string)
		require.Falsef(t, strings.HasPrefix(typ, "AWS::"), "parameter %s is typed %s: a value of one account", name, typ)
		if _, has := p["Default"]; !has {
			noDefault = append(noDefault, name)
		}
	}
	require.Equal(t, []string{"TrustedAccountId"}, noDefault)
	r, err := loadOperatorRole(t, nil).tpl.GetIAMRoleWithName("OperatorRole")
	require.NoError(t, err)
	require.Equal(t, "patch-agent-operator", aws.ToString(r.RoleName), "--role-name's default")
}

func rawTemplateAt(t testing.TB, path string) map[string]any {
	t.Helper()
	saved := templatePathOverride
	templatePathOverride = path
	defer func() { templatePathOverride = saved }()
	return rawTemplate(t)
}

// The agent's settings are stack parameters, each the environment variable of its flag; the stack publishes
// its names under the DeploymentName the operator commands read (org.ParameterName).
func TestAgentSettingsAndPublishedNamesAreStackParameters(t *testing.T) {
	s := loadStack(t, map[string]string{"AllowedAMIOwners": "210987654321,amazon", "HealthTimeout": "20m", "DrainTimeout": "1h",
		"ClusterBudget": "2", "WakeUpEvents": "false", "DeploymentName": "patch-agent-blue"})
	td, err := s.tpl.GetECSTaskDefinitionWithName("TaskDefinition")
	require.NoError(t, err)
	env := map[string]string{}
	for _, kv := range td.ContainerDefinitions[0].Environment {
		env[aws.ToString(kv.Name)] = aws.ToString(kv.Value)
	}
	require.Equal(t, "210987654321,amazon", env[config.EnvAllowedAMIOwners])
	require.Equal(t, "20m", env[config.EnvHealthTimeout])
	require.Equal(t, "1h", env[config.EnvDrainTimeout])
	require.Equal(t, "2", env[config.EnvClusterBudget])
	require.Equal(t, "false", env[config.EnvWakeUpEvents])

	p, _, _ := s.resource(t, "StoreParameter")
	require.Equal(t, org.ParameterName("patch-agent-blue"), p["Name"])
	var d org.Deployment
	require.NoError(t, json.Unmarshal([]byte(p["Value"].(string)), &d))
	require.Equal(t, org.Deployment{Table: refTo("Table"), QueueURL: refTo("Queue"), WakeUpQueueURL: refTo("WakeUpQueue"), Stack: d.Stack}, d)
	def, _, _ := loadStack(t, defaultConfig).resource(t, "StoreParameter")
	require.Equal(t, org.ParameterName(org.DefaultDeployment), def["Name"])

	// The operator role may read it and send to the wake-up queue the stack names.
	allowedParam := false
	for _, st := range loadOperatorRole(t, nil).roleStatements(t, "OperatorRole") {
		if slicesContain(st.actions, "ssm:GetParameters") {
			for _, r := range st.resources {
				allowedParam = allowedParam || arnMatch(r, "arn:aws:ssm:us-east-1:"+testAccount+":parameter"+org.ParameterName("patch-agent-blue"))
			}
		}
		if slicesContain(st.actions, "sqs:SendMessage") {
			require.True(t, arnMatch(st.resources[0], "arn:aws:sqs:us-east-1:"+testAccount+":StackSet-patch-agent-0a1b-WakeUpQueue-AbC123"))
		}
	}
	require.True(t, allowedParam)
}
