package cfntest

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/health"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/selfcheck"
	"github.com/patch-agent/patch-agent/internal/state"
)

// optInTagKey is the condition key of the opt-in tag on the resource acted on.
var optInTagKey = "aws:ResourceTag/" + model.TagEnabled

// justifiedExceptions are the only mutating actions the task role may be allowed on every resource (or every
// resource of a kind: "*", "arn:...:*", "arn:...:*/*") without the opt-in tag condition. Each still needs
// its own condition key, named here.
var justifiedExceptions = map[string]struct{ conditionKey, why string }{
	// CloudWatch supports no resource-level permission for PutMetricData; the namespace condition keeps the
	// agent to its own metrics.
	"cloudwatch:PutMetricData": {"cloudwatch:namespace", "metrics only in namespace PatchAgent"},
	// Auto Scaling checks that the caller of StartInstanceRefresh with a desired configuration could run
	// instances from the launch template version it names, including its tag specifications: tags may be
	// created only by RunInstances (ec2:CreateAction), never on existing resources.
	"ec2:CreateTags": {"ec2:CreateAction", "tags only while launching"},
}

// statement is one IAM policy statement, normalized.
type statement struct {
	where       string // role/policy#Sid
	effect      string
	actions     []string
	resources   []string
	notAction   bool
	notResource bool
	principal   any
	// conditions maps operator -> key -> values.
	conditions map[string]map[string][]string
}

func (st statement) hasConditionKey(key string) bool {
	for _, keys := range st.conditions {
		if _, ok := keys[key]; ok {
			return true
		}
	}
	return false
}

// strs reads a string or a list of strings.
func strs(t testing.TB, where string, v any) []string {
	t.Helper()
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			require.Truef(t, ok, "%s: %v is not a string", where, e)
			out = append(out, s)
		}
		return out
	}
	t.Fatalf("%s: %v (%T) is neither a string nor a list of strings", where, v, v)
	return nil
}

// parseStatements reads the statements of a policy document.
func parseStatements(t testing.TB, where string, doc any) []statement {
	t.Helper()
	d, ok := doc.(map[string]any)
	require.Truef(t, ok, "%s: policy document is %T", where, doc)
	require.Equalf(t, "2012-10-17", d["Version"], "%s: policy language version", where)
	var raw []any
	switch x := d["Statement"].(type) {
	case []any:
		raw = x
	case map[string]any:
		raw = []any{x}
	}
	require.NotEmptyf(t, raw, "%s: no statements", where)
	var out []statement
	for i, r := range raw {
		m, ok := r.(map[string]any)
		require.Truef(t, ok, "%s: statement %d is %T", where, i, r)
		sid, _ := m["Sid"].(string)
		if sid == "" {
			sid = fmt.Sprint(i)
		}
		st := statement{where: where + "#" + sid, principal: m["Principal"], conditions: map[string]map[string][]string{}}
		st.effect, _ = m["Effect"].(string)
		st.actions = strs(t, st.where, m["Action"])
		st.resources = strs(t, st.where, m["Resource"])
		_, st.notAction = m["NotAction"]
		_, st.notResource = m["NotResource"]
		if c, ok := m["Condition"].(map[string]any); ok {
			for op, keys := range c {
				km, ok := keys.(map[string]any)
				require.Truef(t, ok, "%s: condition %s", st.where, op)
				st.conditions[op] = map[string][]string{}
				for k, v := range km {
					st.conditions[op][k] = strs(t, st.where+" condition "+op+" "+k, v)
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// roleStatements returns the statements a role's identity policies hold: its inline policies and the
// AWS::IAM::Policy resources attached to it.
func (s *stack) roleStatements(t testing.TB, role string) []statement {
	t.Helper()
	r, err := s.tpl.GetIAMRoleWithName(role)
	require.NoError(t, err)
	var out []statement
	for _, p := range r.Policies {
		out = append(out, parseStatements(t, role+"/"+p.PolicyName, p.PolicyDocument)...)
	}
	require.Emptyf(t, r.ManagedPolicyArns, "%s: managed policies cannot be checked here", role)
	ids := make([]string, 0)
	for id := range s.tpl.GetAllIAMPolicyResources() {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		p := s.tpl.GetAllIAMPolicyResources()[id]
		if slices.Contains(p.Roles, refTo(role)) {
			out = append(out, parseStatements(t, id, p.PolicyDocument)...)
		}
	}
	return out
}

// allIdentityStatements returns the statements of every role of the stack, by role.
func (s *stack) allIdentityStatements(t testing.TB) map[string][]statement {
	out := map[string][]statement{}
	for _, id := range s.resourcesOfType("AWS::IAM::Role") {
		out[id] = s.roleStatements(t, id)
	}
	return out
}

// readOnly says whether an action only reads, by the IAM naming convention.
func readOnly(action string) bool {
	_, verb, _ := strings.Cut(action, ":")
	for _, p := range []string{"Describe", "List", "Get"} {
		if strings.HasPrefix(verb, p) {
			return true
		}
	}
	return false
}

// everyResource says whether a Resource element names every resource (of a service or of a kind).
func everyResource(r string) bool {
	if r == "*" {
		return true
	}
	parts := strings.SplitN(r, ":", 6)
	return len(parts) == 6 && (parts[5] == "*" || parts[5] == "*/*")
}

func TestNoMutatingActionOnEveryResourceWithoutTheOptInTag(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			s := loadStack(t, c.params)
			for role, sts := range s.allIdentityStatements(t) {
				for _, st := range sts {
					require.Equalf(t, "Allow", st.effect, "%s: identity policies here only allow", st.where)
					require.Falsef(t, st.notAction || st.notResource, "%s: NotAction/NotResource allow too much", st.where)
					require.NotEmptyf(t, st.resources, "%s: no Resource", st.where)
					for _, a := range st.actions {
						require.NotContainsf(t, a, "*", "%s (%s): action %s is a wildcard; list the actions", st.where, role, a)
						if readOnly(a) || !slices.ContainsFunc(st.resources, everyResource) {
							continue
						}
						if st.hasConditionKey(optInTagKey) {
							continue
						}
						ex, ok := justifiedExceptions[a]
						require.Truef(t, ok, "%s (%s): mutating action %s on %v without a condition on %s",
							st.where, role, a, st.resources, optInTagKey)
						require.Truef(t, st.hasConditionKey(ex.conditionKey), "%s: %s is allowed on every resource only with condition %s (%s)",
							st.where, a, ex.conditionKey, ex.why)
					}
				}
			}
		})
	}
}

// serviceOf maps the interfaces through which the agent calls AWS (internal/awsapi, the DynamoDB store, the
// readiness checks) to IAM service prefixes: every method is an action the task role must allow. An
// interface added there must be added here, and its calls to the task role.
var serviceOf = map[reflect.Type]string{
	reflect.TypeFor[state.DynamoDBAPI]():         "dynamodb",
	reflect.TypeFor[health.DescribeTableAPI]():   "dynamodb",
	reflect.TypeFor[health.QueueAttributesAPI](): "sqs",
	reflect.TypeFor[awsapi.AutoScaling]():        "autoscaling",
	reflect.TypeFor[awsapi.STS]():                "sts",
	reflect.TypeFor[awsapi.EC2]():                "ec2",
	reflect.TypeFor[awsapi.EC2InstanceTypes]():   "ec2",
	reflect.TypeFor[awsapi.ECS]():                "ecs",
	reflect.TypeFor[awsapi.SSM]():                "ssm",
	reflect.TypeFor[awsapi.SQS]():                "sqs",
	reflect.TypeFor[awsapi.CloudWatch]():         "cloudwatch",
	reflect.TypeFor[awsapi.EventBridge]():        "events",
	reflect.TypeFor[awsapi.EKS]():                "eks",
	reflect.TypeFor[awsapi.EKSNodegroups]():      "eks",
	reflect.TypeFor[selfcheck.GroupsAPI]():       "autoscaling",
}

// implied are actions the task role allows that the agent does not call itself.
var implied = map[string]string{
	"ec2:RunInstances": "Auto Scaling checks it when the agent starts an instance refresh naming a launch template version",
	"ec2:CreateTags":   "the same check, for the launch template's tag specifications",
	"iam:PassRole":     "the same check, for the launch template's instance profile",
	"ssm:GetParameter": "the single-parameter form of GetParameters, for tools run with the task role",
	// KmsKeyArn: SQS and DynamoDB call KMS on the agent's behalf (kms:ViaService) for a queue and table
	// encrypted with the customer's key.
	"kms:Decrypt":         "SQS decrypts received messages, DynamoDB reads items, with the stack's KMS key",
	"kms:GenerateDataKey": "DynamoDB writes items (and SQS re-encrypts) with the stack's KMS key",
}

// noPermission are calls IAM does not authorize: no policy needs to (or can) allow them, so the task role lists
// none. AWS STS API Reference, "GetCallerIdentity": no permissions are required to perform this operation,
// and an administrator's explicit Deny does not stop it (the operator commands call it to name who approved).
var noPermission = map[string]string{
	"sts:GetCallerIdentity": "no permission is required (AWS STS API Reference, GetCallerIdentity)",
}

// governedBy maps the calls that are no IAM action of their own to the actions IAM checks for them instead.
var governedBy = map[string][]string{
	// Amazon DynamoDB Developer Guide, "Using IAM with DynamoDB transactions": the Puts of a transaction are
	// governed by dynamodb:PutItem, its ConditionChecks by dynamodb:ConditionCheckItem (the pause checks of
	// state.DynamoDB.PutRolloutUnlessPaused).
	"dynamodb:TransactWriteItems": {"dynamodb:PutItem", "dynamodb:ConditionCheckItem"},
}

// agentCalls returns every AWS action the agent calls, from the interfaces of serviceOf (a call in
// governedBy counts as the actions IAM checks for it).
func agentCalls() map[string]bool {
	calls := map[string]bool{}
	for typ, service := range serviceOf {
		for i := range typ.NumMethod() {
			call := service + ":" + typ.Method(i).Name
			if _, ok := noPermission[call]; ok {
				continue
			}
			if actions, ok := governedBy[call]; ok {
				for _, a := range actions {
					calls[a] = true
				}
				continue
			}
			calls[call] = true
		}
	}
	return calls
}

func TestTaskRoleAllowsEveryCallOfTheAgent(t *testing.T) {
	s := loadStack(t, defaultConfig)
	allowed := map[string]bool{}
	for _, st := range s.roleStatements(t, "TaskRole") {
		for _, a := range st.actions {
			allowed[a] = true
		}
	}
	for _, call := range keys(agentCalls()) {
		require.Truef(t, allowed[call], "the agent calls %s but the task role does not allow it", call)
	}
}

func TestTaskRoleAllowsNothingTheAgentDoesNotCall(t *testing.T) {
	s := loadStack(t, fullConfig)
	calls := agentCalls()
	for _, st := range s.roleStatements(t, "TaskRole") {
		for _, a := range st.actions {
			_, ok := implied[a]
			require.Truef(t, calls[a] || ok, "%s: the task role allows %s, which the agent never calls", st.where, a)
		}
	}
}

// request is what the agent asks for: an action on a resource, with the request's condition context.
type request struct {
	action, resource string
	context          map[string]string
}

// allows evaluates identity statements for one request, as IAM does for the operators the template uses:
// allowed when an Allow statement matches the action, the resource and every condition (keys ANDed, values
// ORed, a key absent from the context fails), and no Deny matches.
func allows(t testing.TB, sts []statement, r request) bool {
	t.Helper()
	allowed := false
	for _, st := range sts {
		if !slices.ContainsFunc(st.actions, func(a string) bool { return wildcardMatch(a, r.action, true) }) ||
			!slices.ContainsFunc(st.resources, func(p string) bool { return arnMatch(p, r.resource) }) ||
			!conditionsHold(t, st, r.context) {
			continue
		}
		if st.effect == "Deny" {
			return false
		}
		allowed = true
	}
	return allowed
}

// conditionsHold evaluates a statement's conditions as IAM does (IAM User Guide, "Condition operators"):
// operators and keys ANDed, the values of a key ORed; a key absent from the request context fails a positive
// operator and satisfies a negated one (ArnNotEquals, ArnNotLike, StringNotEquals), whose value must match
// none of the listed values.
func conditionsHold(t testing.TB, st statement, ctx map[string]string) bool {
	t.Helper()
	for op, keys := range st.conditions {
		for key, want := range keys {
			got, present := ctx[key]
			var match func(pattern string) bool
			negated := false
			switch op {
			case "StringEquals", "Bool":
				match = func(p string) bool { return p == got }
			case "StringNotEquals":
				match, negated = func(p string) bool { return p == got }, true
			case "StringEqualsIgnoreCase":
				match = func(p string) bool { return strings.EqualFold(p, got) }
			case "StringLike":
				match = func(p string) bool { return wildcardMatch(p, got, false) }
			case "ArnEquals", "ArnLike":
				match = func(p string) bool { return arnMatch(p, got) }
			case "ArnNotEquals", "ArnNotLike":
				match, negated = func(p string) bool { return arnMatch(p, got) }, true
			default:
				t.Fatalf("%s: the test's evaluator does not know condition operator %s", st.where, op)
			}
			if negated {
				if present && slices.ContainsFunc(want, match) {
					return false
				}
				continue
			}
			if !present || !slices.ContainsFunc(want, match) {
				return false
			}
		}
	}
	return true
}

// arnMatch matches an ARN against a Resource pattern segment by segment (a wildcard does not cross a colon
// between the first six segments); "*" matches anything.
func arnMatch(pattern, arn string) bool {
	if pattern == "*" {
		return true
	}
	p, a := strings.SplitN(pattern, ":", 6), strings.SplitN(arn, ":", 6)
	if len(p) != len(a) {
		return false
	}
	for i := range p {
		if !wildcardMatch(p[i], a[i], false) {
			return false
		}
	}
	return true
}

// wildcardMatch matches s against a pattern with * (any run) and ? (one character).
func wildcardMatch(pattern, s string, ignoreCase bool) bool {
	if ignoreCase {
		pattern, s = strings.ToLower(pattern), strings.ToLower(s)
	}
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if wildcardMatch(pattern[1:], s[i:], false) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && wildcardMatch(pattern[1:], s[1:], false)
	}
	return s != "" && s[0] == pattern[0] && wildcardMatch(pattern[1:], s[1:], false)
}

func TestWhatTheTaskRoleMayDo(t *testing.T) {
	s := loadStack(t, fullConfig) // EcsClusterNames prod,staging; the AMI parameters of the fixtures
	sts := s.roleStatements(t, "TaskRole")

	const acct, region = testAccount, testRegion
	group := "arn:aws:autoscaling:" + region + ":" + acct + ":autoScalingGroup:0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0:autoScalingGroupName/ecs-prod"
	template := "arn:aws:ec2:" + region + ":" + acct + ":launch-template/lt-0123456789abcdef0"
	instance := "arn:aws:ec2:" + region + ":" + acct + ":instance/i-0123456789abcdef0"
	containerInstance := "arn:aws:ecs:" + region + ":" + acct + ":container-instance/prod/0123456789abcdef0123456789abcdef"
	nodegroup := "arn:aws:eks:" + region + ":" + acct + ":nodegroup/prod/workers/12c3-45d6"
	param := func(name string) string {
		return "arn:aws:ssm:" + region + ":" + acct + ":parameter/" + strings.TrimPrefix(name, "/")
	}
	public := "arn:aws:ssm:" + region + "::parameter/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"
	tagged := map[string]string{optInTagKey: "true"}
	cluster := func(name string) map[string]string {
		return map[string]string{"ecs:cluster": "arn:aws:ecs:" + region + ":" + acct + ":cluster/" + name}
	}

	cases := []struct {
		name string
		req  request
		want bool
	}{
		{"starts an instance refresh of an opted-in group", request{"autoscaling:StartInstanceRefresh", group, tagged}, true},
		{"reads the opt-in tag in any case, like discovery", request{"autoscaling:CancelInstanceRefresh", group, map[string]string{optInTagKey: "True"}}, true},
		{"completes lifecycle actions of opted-in groups", request{"autoscaling:CompleteLifecycleAction", group, tagged}, true},
		{"does not touch a group without the tag", request{"autoscaling:StartInstanceRefresh", group, nil}, false},
		{"does not touch a group tagged false", request{"autoscaling:RollbackInstanceRefresh", group, map[string]string{optInTagKey: "false"}}, false},
		{"never writes desired capacity", request{"autoscaling:SetDesiredCapacity", group, tagged}, false},
		{"never changes scale-in protection", request{"autoscaling:SetInstanceProtection", group, tagged}, false},
		{"never updates a group (desired capacity, MaxSize, launch template)", request{"autoscaling:UpdateAutoScalingGroup", group, tagged}, false},
		{"never terminates an instance through Auto Scaling", request{"autoscaling:TerminateInstanceInAutoScalingGroup", group, tagged}, false},
		{"does not complete lifecycle actions of other groups", request{"autoscaling:CompleteLifecycleAction", group, nil}, false},
		{"cannot change a group's tags", request{"autoscaling:CreateOrUpdateTags", group, tagged}, false},
		{"cannot delete a group", request{"autoscaling:DeleteAutoScalingGroup", group, tagged}, false},
		{"confirms a lifecycle message's instance with Auto Scaling, whatever group it names", request{"autoscaling:DescribeAutoScalingInstances", "*", nil}, true},
		{"lists a group's warm pool instances", request{"autoscaling:DescribeWarmPool", "*", nil}, true},

		{"versions a tagged launch template", request{"ec2:CreateLaunchTemplateVersion", template, tagged}, true},
		{"does not version an untagged launch template", request{"ec2:CreateLaunchTemplateVersion", template, nil}, false},
		{"cannot change a template's default version", request{"ec2:ModifyLaunchTemplate", template, tagged}, false},
		{"passes the launch check of a tagged template", request{"ec2:RunInstances", template, map[string]string{optInTagKey: "true", "ec2:LaunchTemplate": template}}, true},
		{"fails the launch check of an untagged template", request{"ec2:RunInstances", template, map[string]string{"ec2:LaunchTemplate": template}}, false},
		{"launches instances only through a launch template", request{"ec2:RunInstances", instance, map[string]string{"ec2:LaunchTemplate": template}}, true},
		{"cannot launch instances without a launch template", request{"ec2:RunInstances", instance, nil}, false},
		{"launches public AMIs through a launch template", request{"ec2:RunInstances", "arn:aws:ec2:" + region + "::image/ami-0123456789abcdef0", map[string]string{"ec2:LaunchTemplate": template}}, true},
		{"tags only while launching", request{"ec2:CreateTags", instance, map[string]string{"ec2:CreateAction": "RunInstances"}}, true},
		{"cannot tag existing resources", request{"ec2:CreateTags", instance, nil}, false},
		{"cannot terminate instances with EC2", request{"ec2:TerminateInstances", instance, nil}, false},

		{"passes the instance role to EC2", request{"iam:PassRole", "arn:aws:iam::" + acct + ":role/ecsInstanceRole", map[string]string{"iam:PassedToService": "ec2.amazonaws.com"}}, true},
		{"passes the instance role to nothing else", request{"iam:PassRole", "arn:aws:iam::" + acct + ":role/ecsInstanceRole", map[string]string{"iam:PassedToService": "lambda.amazonaws.com"}}, false},
		{"passes no other role", request{"iam:PassRole", "arn:aws:iam::" + acct + ":role/Admin", map[string]string{"iam:PassedToService": "ec2.amazonaws.com"}}, false},

		{"drains container instances of a listed cluster", request{"ecs:UpdateContainerInstancesState", containerInstance, cluster("prod")}, true},
		{"does not drain in other clusters", request{"ecs:UpdateContainerInstancesState", containerInstance, cluster("payments")}, false},
		{"does not drain in other accounts", request{"ecs:UpdateContainerInstancesState", strings.Replace(containerInstance, acct, "210987654321", 1), cluster("prod")}, false},
		{"cannot stop tasks", request{"ecs:StopTask", "arn:aws:ecs:" + region + ":" + acct + ":task/prod/abc", cluster("prod")}, false},

		{"updates an opted-in managed node group", request{"eks:UpdateNodegroupVersion", nodegroup, tagged}, true},
		{"does not update other node groups", request{"eks:UpdateNodegroupVersion", nodegroup, nil}, false},

		{"reads public AMI parameters", request{"ssm:GetParameters", public, nil}, true},
		{"reads a named hierarchical parameter", request{"ssm:GetParameters", param("/golden-ami/ecs/al2023"), nil}, true},
		{"reads a named top-level parameter", request{"ssm:GetParameters", param("MyGoldenAMI"), nil}, true},
		{"reads parameters under the prefix", request{"ssm:GetParameter", param("/golden-ami/eks/1.31"), nil}, true},
		{"reads no other parameter", request{"ssm:GetParameters", param("/prod/db/password"), nil}, false},
		{"reads no parameter that only starts like a named one", request{"ssm:GetParameters", param("MyGoldenAMI-old"), nil}, false},
		{"reads no public parameter outside /aws/service", request{"ssm:GetParameters", "arn:aws:ssm:" + region + "::parameter/other/x", nil}, false},
		{"cannot write parameters", request{"ssm:PutParameter", param("/golden-ami/ecs/al2023"), nil}, false},

		{"consumes its queue", request{"sqs:DeleteMessage", arnOf("Queue"), nil}, true},
		{"consumes its wake-up queue", request{"sqs:ReceiveMessage", arnOf("WakeUpQueue"), nil}, true},
		{"deletes handled wake-ups in batches", request{"sqs:DeleteMessageBatch", arnOf("WakeUpQueue"), nil}, true},
		{"does not consume other queues", request{"sqs:ReceiveMessage", "arn:aws:sqs:" + region + ":" + acct + ":other", nil}, false},
		{"does not read the dead-letter queue", request{"sqs:ReceiveMessage", arnOf("DeadLetterQueue"), nil}, false},
		{"cannot purge its queue", request{"sqs:PurgeQueue", arnOf("Queue"), nil}, false},
		{"writes its table", request{"dynamodb:PutItem", arnOf("Table"), nil}, true},
		{"does not write other tables", request{"dynamodb:PutItem", "arn:aws:dynamodb:" + region + ":" + acct + ":table/other", nil}, false},
		{"cannot delete its table", request{"dynamodb:DeleteTable", arnOf("Table"), nil}, false},
		{"cannot change its table", request{"dynamodb:UpdateTable", arnOf("Table"), nil}, false},
		{"publishes metrics in PatchAgent", request{"cloudwatch:PutMetricData", "*", map[string]string{"cloudwatch:namespace": "PatchAgent"}}, true},
		{"publishes no metrics elsewhere", request{"cloudwatch:PutMetricData", "*", map[string]string{"cloudwatch:namespace": "AWS/EC2"}}, false},
		{"notifies on the default bus", request{"events:PutEvents", "arn:aws:events:" + region + ":" + acct + ":event-bus/default", map[string]string{"events:source": "patch-agent"}}, true},
		{"notifies on no other bus", request{"events:PutEvents", "arn:aws:events:" + region + ":" + acct + ":event-bus/other", map[string]string{"events:source": "patch-agent"}}, false},
		{"cannot impersonate AWS services", request{"events:PutEvents", "arn:aws:events:" + region + ":" + acct + ":event-bus/default", map[string]string{"events:source": "aws.ssm"}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, allows(t, sts, c.req), "%s on %s with %v", c.req.action, c.req.resource, c.req.context)
		})
	}
}

func TestLaunchTemplateChecksNeedTheTaggedTemplate(t *testing.T) {
	s := loadStack(t, defaultConfig)
	var onTemplates bool
	for _, st := range s.roleStatements(t, "TaskRole") {
		if slices.Contains(st.actions, "ec2:RunInstances") && slices.ContainsFunc(st.resources, func(r string) bool {
			return strings.HasSuffix(r, ":launch-template/*")
		}) {
			require.Truef(t, st.hasConditionKey(optInTagKey), "%s: RunInstances on launch templates needs the opt-in tag", st.where)
			onTemplates = true
		}
	}
	require.True(t, onTemplates, "no statement allows ec2:RunInstances on tagged launch templates")
}

func TestAssumeRolePoliciesNameOneServiceOfThisAccount(t *testing.T) {
	s := loadStack(t, fullConfig)
	want := map[string]string{
		"TaskRole":          "ecs-tasks.amazonaws.com",
		"ExecutionRole":     "ecs-tasks.amazonaws.com",
		"LifecycleHookRole": "autoscaling.amazonaws.com",
	}
	require.ElementsMatch(t, keys(want), s.resourcesOfType("AWS::IAM::Role"))
	for role, service := range want {
		r, err := s.tpl.GetIAMRoleWithName(role)
		require.NoError(t, err)
		sts := parseStatements(t, role+"/trust", r.AssumeRolePolicyDocument)
		require.Len(t, sts, 1, role)
		require.Equal(t, map[string]any{"Service": service}, sts[0].principal, role)
		require.Equal(t, []string{"sts:AssumeRole"}, sts[0].actions, role)
		require.Equal(t, []string{testAccount}, sts[0].conditions["StringEquals"]["aws:SourceAccount"], "%s: confused deputy", role)
	}
}

// TestECSAssumesTheTaskRolesOnlyForThisAccountsTasks evaluates the trust policies of the two roles ECS assumes
// (ecs-tasks.amazonaws.com) for the request contexts ECS builds: the task role also pins aws:SourceArn to
// this account's ECS resources in the stack's region (the Amazon ECS Developer Guide documents it for the
// task role, as a wildcard: not one cluster); the execution role carries aws:SourceAccount only, the guide's
// trust policy for it having no condition, and a condition on a key ECS does not send would stop every task.
func TestECSAssumesTheTaskRolesOnlyForThisAccountsTasks(t *testing.T) {
	s := loadStack(t, defaultConfig)
	task := func(region, account string) map[string]string {
		return map[string]string{
			"aws:SourceAccount": account,
			"aws:SourceArn":     "arn:aws:ecs:" + region + ":" + account + ":task/patch-agent-Cluster-0123/0123456789abcdef0123456789abcdef",
		}
	}
	trust := func(role string) []statement {
		r, err := s.tpl.GetIAMRoleWithName(role)
		require.NoError(t, err)
		return parseStatements(t, role+"/trust", r.AssumeRolePolicyDocument)
	}
	// assumes says whether ECS may assume the role in a request context: a trust statement names no
	// resource, so it is the principal, the action and the conditions.
	assumes := func(sts []statement, ctx map[string]string) bool {
		for _, st := range sts {
			if st.effect == "Allow" && slices.Contains(st.actions, "sts:AssumeRole") &&
				reflect.DeepEqual(st.principal, map[string]any{"Service": "ecs-tasks.amazonaws.com"}) && conditionsHold(t, st, ctx) {
				return true
			}
		}
		return false
	}

	taskRole := trust("TaskRole")
	require.Equal(t, []string{"arn:aws:ecs:" + testRegion + ":" + testAccount + ":*"}, taskRole[0].conditions["ArnLike"]["aws:SourceArn"])
	for _, c := range []struct {
		name    string
		context map[string]string
		want    bool
	}{
		{"a task of this account in the stack's region", task(testRegion, testAccount), true},
		{"a task of another account", task(testRegion, otherAccount), false},
		{"this account's task in another region", task("eu-west-1", testAccount), false},
		{"a request without a source", map[string]string{}, false},
	} {
		t.Run("TaskRole/"+c.name, func(t *testing.T) {
			require.Equal(t, c.want, assumes(taskRole, c.context))
		})
	}

	execRole := trust("ExecutionRole")
	require.False(t, execRole[0].hasConditionKey("aws:SourceArn"), "the execution role's trust carries no aws:SourceArn (not documented for it)")
	require.True(t, assumes(execRole, task(testRegion, testAccount)), "ECS for this account's task")
	require.True(t, assumes(execRole, map[string]string{"aws:SourceAccount": testAccount}), "ECS for this account, without a source ARN")
	require.False(t, assumes(execRole, task(testRegion, otherAccount)), "ECS for another account's task")
	require.False(t, assumes(execRole, map[string]string{}), "a request without a source account")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
