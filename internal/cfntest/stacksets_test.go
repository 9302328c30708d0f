package cfntest

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7/intrinsics"
	"github.com/stretchr/testify/require"
)

// resource returns the resolved properties of a resource (nil when the configuration leaves it out), and its
// deletion policies.
func (s *stack) resource(t testing.TB, id string) (props map[string]any, deletion, updateReplace string) {
	t.Helper()
	res, _ := s.raw["Resources"].(map[string]any)
	r, ok := res[id].(map[string]any)
	if !ok {
		return nil, "", ""
	}
	props, _ = r["Properties"].(map[string]any)
	deletion, _ = r["DeletionPolicy"].(string)
	updateReplace, _ = r["UpdateReplacePolicy"].(string)
	return props, deletion, updateReplace
}

// A StackSet with automatic deployment to an organizational unit gives every account the same parameter
// values: no parameter may need a value that differs per account (an id of a subnet or security group, an
// ARN naming the account). The parameters without a default are the ones that hold everywhere, and an
// account-specific value given to them is refused by their pattern.
func TestStackSetsDeploysToEveryAccountWithoutPerAccountValues(t *testing.T) {
	data := rawTemplate(t)
	params, _ := data["Parameters"].(map[string]any)
	var noDefault []string
	for name, v := range params {
		p, _ := v.(map[string]any)
		typ, _ := p["Type"].(string)
		require.Falsef(t, strings.HasPrefix(typ, "AWS::EC2::") || strings.HasPrefix(typ, "List<AWS::"),
			"parameter %s is typed %s: an id of one account; use an SSM parameter type (AWS::SSM::Parameter::Value<...>)", name, typ)
		if strings.HasPrefix(typ, "AWS::SSM::Parameter::Value<") {
			require.Containsf(t, p, "Default", "SSM-typed parameter %s names the same parameter in every account by default", name)
		}
		if _, has := p["Default"]; !has {
			noDefault = append(noDefault, name)
		}
		if strings.HasSuffix(name, "Arn") || strings.HasSuffix(name, "Arns") {
			require.Equalf(t, "", p["Default"], "parameter %s names an account in its ARN: it must be optional (default empty)", name)
		}
	}
	sort.Strings(noDefault)
	require.Equal(t, []string{"AgentImage", "EcsClusterNames", "InstanceRoleNames", "OperatorRoleNames"}, noDefault,
		"only values that hold in every account are required: an image, names and name patterns")

	for _, c := range []struct{ param, value string }{
		{"InstanceRoleNames", "arn:aws:iam::" + testAccount + ":role/ecsInstanceRole"},
		{"EcsClusterNames", "arn:aws:ecs:us-east-1:" + testAccount + ":cluster/prod"},
		{"OperatorRoleNames", "arn:aws:iam::" + testAccount + ":role/ops"},
		{"PermissionsBoundaryName", "arn:aws:iam::" + testAccount + ":policy/boundary"},
	} {
		p, _ := params[c.param].(map[string]any)
		pattern, _ := p["AllowedPattern"].(string)
		require.NotEmptyf(t, pattern, "%s has an AllowedPattern", c.param)
		require.NotRegexpf(t, "^(?:"+pattern+")$", c.value, "%s refuses an ARN, which names one account", c.param)
	}

	// The VPC inputs come from each account's Parameter Store.
	s := loadStack(t, defaultConfig)
	svc, _, _ := s.resource(t, "Service")
	vpc := svc["NetworkConfiguration"].(map[string]any)["AwsvpcConfiguration"].(map[string]any)
	require.Equal(t, []any{"subnet-0123456789abcdef0", "subnet-0fedcba9876543210"}, vpc["Subnets"])
	require.Equal(t, []any{"sg-0123456789abcdef0"}, vpc["SecurityGroups"])
}

// templatePathOverride, when set, is the template rawTemplate reads instead of templatePath.
var templatePathOverride string

// rawTemplate is the template in long form, unresolved.
func rawTemplate(t testing.TB) map[string]any {
	t.Helper()
	path := templatePath
	if templatePathOverride != "" {
		path = templatePathOverride
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	longForm, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(longForm, &raw))
	return raw
}

// The ECS drain permission is never every cluster: EcsClusterNames has no default, and its pattern refuses
// any name that does not start with a literal character ("*", "prod,*", "*-prod"), so that CloudFormation
// refuses the stack before anything is created; names and patterns scope the condition.
func TestEcsDrainIsScopedToNamedClustersNeverEveryCluster(t *testing.T) {
	p, _ := rawTemplate(t)["Parameters"].(map[string]any)["EcsClusterNames"].(map[string]any)
	require.NotContains(t, p, "Default", "no default: never every cluster unless named")
	pattern := regexp.MustCompile("^(?:" + p["AllowedPattern"].(string) + ")$")
	for _, c := range []struct {
		value    string
		accepted bool
	}{
		{"*", false},
		{"prod,*", false},
		{"*-prod", false},
		{"", false},
		{"prod", true},
		{"prod-*,staging-*", true},
		{"team_a-*-ecs", true},
	} {
		require.Equalf(t, c.accepted, pattern.MatchString(c.value), "EcsClusterNames %q", c.value)
	}

	s := loadStack(t, map[string]string{"EcsClusterNames": "prod-*"})
	sts := s.roleStatements(t, "TaskRole")
	ci := "arn:aws:ecs:" + testRegion + ":" + testAccount + ":container-instance/prod-eu/0123456789abcdef0123456789abcdef"
	in := func(cluster string) map[string]string {
		return map[string]string{"ecs:cluster": "arn:aws:ecs:" + testRegion + ":" + testAccount + ":cluster/" + cluster}
	}
	require.True(t, allows(t, sts, request{"ecs:UpdateContainerInstancesState", ci, in("prod-eu")}), "a cluster matching the pattern")
	require.False(t, allows(t, sts, request{"ecs:UpdateContainerInstancesState", ci, in("payments")}), "a cluster outside the pattern")
	require.False(t, allows(t, sts, request{"ecs:UpdateContainerInstancesState", ci, nil}), "a request without the cluster")
}

// Instance roles are named, with or without a path; no other role may be passed.
func TestInstanceRolesAreNamedNotARNs(t *testing.T) {
	s := loadStack(t, defaultConfig)
	sts := s.roleStatements(t, "TaskRole")
	toEC2 := map[string]string{"iam:PassedToService": "ec2.amazonaws.com"}
	require.True(t, allows(t, sts, request{"iam:PassRole", "arn:aws:iam::" + testAccount + ":role/ecsInstanceRole", toEC2}))
	require.True(t, allows(t, sts, request{"iam:PassRole", "arn:aws:iam::" + testAccount + ":role/nodes/eks-nodes", toEC2}), "with a path")
	require.True(t, allows(t, sts, request{"iam:PassRole", "arn:aws:iam::210987654321:role/ecsInstanceRole", toEC2}),
		"the same name in every account of the StackSet")
	require.False(t, allows(t, sts, request{"iam:PassRole", "arn:aws:iam::" + testAccount + ":role/ecsInstanceRole-admin", toEC2}))
	require.False(t, allows(t, sts, request{"iam:PassRole", "arn:aws:iam::" + testAccount + ":role/Admin", toEC2}))
}

func TestPermissionsBoundaryIsSetOnEveryRoleWhenGiven(t *testing.T) {
	for _, c := range []struct {
		name, boundary, want string
	}{
		{"none", "", ""},
		{"a boundary with a path", "org/patch-agent-boundary", "arn:aws:iam::" + testAccount + ":policy/org/patch-agent-boundary"},
	} {
		t.Run(c.name, func(t *testing.T) {
			params := map[string]string{"LifecycleHookRoute": "Both"} // every role
			if c.boundary != "" {
				params["PermissionsBoundaryName"] = c.boundary
			}
			s := loadStack(t, params)
			roles := s.resourcesOfType("AWS::IAM::Role")
			require.ElementsMatch(t, []string{"TaskRole", "ExecutionRole", "LifecycleHookRole"}, roles)
			for _, id := range roles {
				props, _, _ := s.resource(t, id)
				got, _ := props["PermissionsBoundary"].(string)
				require.Equalf(t, c.want, got, "%s", id)
			}
		})
	}
}

func TestKmsKeyEncryptsQueuesTableAndLogsWhenGiven(t *testing.T) {
	const key = "arn:aws:kms:us-east-1:" + testAccount + ":key/1234abcd-12ab-34cd-56ef-1234567890ab"
	withKey := loadStack(t, map[string]string{"KmsKeyArn": key, "LifecycleHookRoute": "Both"})
	without := loadStack(t, map[string]string{"LifecycleHookRoute": "Both"})
	for _, q := range []string{"Queue", "WakeUpQueue", "DeadLetterQueue"} {
		p, _, _ := withKey.resource(t, q)
		require.Equal(t, key, p["KmsMasterKeyId"], q)
		require.NotContains(t, p, "SqsManagedSseEnabled", "%s: one kind of SSE", q)
		p, _, _ = without.resource(t, q)
		require.Equal(t, true, p["SqsManagedSseEnabled"], q)
		require.NotContains(t, p, "KmsMasterKeyId", q)
	}
	tbl, _, _ := withKey.resource(t, "Table")
	require.Equal(t, map[string]any{"SSEEnabled": true, "SSEType": "KMS", "KMSMasterKeyId": key}, tbl["SSESpecification"])
	tbl, _, _ = without.resource(t, "Table")
	require.Equal(t, map[string]any{"SSEEnabled": true}, tbl["SSESpecification"])
	lg, _, _ := withKey.resource(t, "LogGroup")
	require.Equal(t, key, lg["KmsKeyId"])
	lg, _, _ = without.resource(t, "LogGroup")
	require.NotContains(t, lg, "KmsKeyId")

	// The agent may use the key only through SQS and DynamoDB; the hook role only through SQS.
	sts := withKey.roleStatements(t, "TaskRole")
	via := func(service string) map[string]string {
		return map[string]string{"kms:ViaService": service + "." + testRegion + ".amazonaws.com"}
	}
	require.True(t, allows(t, sts, request{"kms:Decrypt", key, via("sqs")}))
	require.True(t, allows(t, sts, request{"kms:GenerateDataKey", key, via("dynamodb")}))
	require.False(t, allows(t, sts, request{"kms:Decrypt", key, via("s3")}), "not through other services")
	require.False(t, allows(t, sts, request{"kms:Decrypt", key, nil}), "not directly")
	require.False(t, allows(t, sts, request{"kms:Decrypt", strings.Replace(key, "1234abcd", "9999abcd", 1), via("sqs")}), "no other key")
	require.False(t, allows(t, without.roleStatements(t, "TaskRole"), request{"kms:Decrypt", key, via("sqs")}), "no key, no KMS")
	hook := withKey.roleStatements(t, "LifecycleHookRole")
	require.True(t, allows(t, hook, request{"kms:GenerateDataKey", key, via("sqs")}))
	require.False(t, allows(t, hook, request{"kms:GenerateDataKey", key, via("dynamodb")}))
}

// The log group is the agent's trail of actions: it outlives the stack, and a stack created again with the
// same name does not collide with it.
func TestLogGroupIsRetainedAndNamedByCloudFormation(t *testing.T) {
	s := loadStack(t, defaultConfig)
	props, deletion, replace := s.resource(t, "LogGroup")
	require.Equal(t, "Retain", deletion)
	require.Equal(t, "Retain", replace)
	require.NotContains(t, props, "LogGroupName")
	require.EqualValues(t, 30, props["RetentionInDays"])
}

func TestContainerHealthCheckAsksTheAgentItself(t *testing.T) {
	s := loadStack(t, defaultConfig)
	td, _, _ := s.resource(t, "TaskDefinition")
	c := td["ContainerDefinitions"].([]any)[0].(map[string]any)
	hc, ok := c["HealthCheck"].(map[string]any)
	require.True(t, ok, "the container has a health check")
	require.Equal(t, []any{"CMD", "/patch-agent", "healthcheck"}, hc["Command"], "exec form: the image has no shell")
	require.GreaterOrEqual(t, hc["StartPeriod"].(float64), 60.0, "covers the start-up check and the first tick")
	require.Less(t, hc["Timeout"].(float64), hc["Interval"].(float64))
}
