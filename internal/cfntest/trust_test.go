package cfntest

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/stretchr/testify/require"
)

// The trust boundary of the stack (docs/security.md): who may send to the queue and write the state table.
// Each test evaluates the resource policies of the resolved template with the same small evaluator as the
// task role's tests (iam_test.go), for callers described by their request context.

// caller is who makes a request: a service principal on behalf of a resource (sourceArn), or an IAM role
// session (roleArn; aws:PrincipalArn is the role's ARN, not the session's).
type caller struct {
	service   string // e.g. events.amazonaws.com
	sourceArn string
	roleArn   string
}

// context is the caller's request context, as IAM builds it (IAM User Guide, "AWS global condition context
// keys"): aws:PrincipalArn and aws:PrincipalAccount for IAM principals, aws:SourceArn and aws:SourceAccount
// when a service principal acts for a resource; always over TLS.
func (c caller) context() map[string]string {
	ctx := map[string]string{"aws:SecureTransport": "true"}
	if c.roleArn != "" {
		ctx["aws:PrincipalArn"] = c.roleArn
		account := testAccount
		if parts := strings.Split(c.roleArn, ":"); len(parts) == 6 {
			account = parts[4]
		}
		ctx["aws:PrincipalAccount"] = account
	}
	if c.sourceArn != "" {
		ctx["aws:SourceArn"] = c.sourceArn
		ctx["aws:SourceAccount"] = testAccount
	}
	return ctx
}

func role(account, nameWithPath string) string {
	return "arn:aws:iam::" + account + ":role/" + nameWithPath
}

// deniedByResourcePolicy says whether an explicit Deny of a resource policy matches the request: Principal
// "*", the action, the resource and every condition. No identity policy can override it (IAM User Guide,
// "Policy evaluation logic").
func deniedByResourcePolicy(t testing.TB, sts []statement, c caller, action, resource string) bool {
	t.Helper()
	for _, st := range sts {
		if st.effect != "Deny" {
			continue
		}
		require.Equalf(t, "*", st.principal, "%s: a Deny here names every principal", st.where)
		if slices.ContainsFunc(st.actions, func(a string) bool { return wildcardMatch(a, action, true) }) &&
			slices.ContainsFunc(st.resources, func(p string) bool { return arnMatch(p, resource) }) &&
			conditionsHold(t, st, c.context()) {
			return true
		}
	}
	return false
}

// allowedByResourcePolicy says whether an Allow of a resource policy admits a service principal's request.
func allowedByResourcePolicy(t testing.TB, sts []statement, c caller, action, resource string) bool {
	t.Helper()
	for _, st := range sts {
		p, _ := st.principal.(map[string]any)
		if st.effect == "Allow" && c.service != "" && p["Service"] == c.service &&
			slices.ContainsFunc(st.actions, func(a string) bool { return wildcardMatch(a, action, true) }) &&
			slices.ContainsFunc(st.resources, func(r string) bool { return arnMatch(r, resource) }) &&
			conditionsHold(t, st, c.context()) {
			return true
		}
	}
	return false
}

// queuePolicy returns the statements of the policy of queue ("Queue" or "WakeUpQueue", queuePolicies).
func (s *stack) queuePolicy(t testing.TB, queue string) []statement {
	t.Helper()
	id := queuePolicies[queue]
	p := s.tpl.GetAllSQSQueuePolicyResources()[id]
	require.NotNil(t, p, "queue policy %s", id)
	return parseStatements(t, id, p.PolicyDocument)
}

// tablePolicy returns the statements of the table's resource policy, read from the resolved template.
func (s *stack) tablePolicy(t testing.TB) []statement {
	t.Helper()
	res, _ := s.raw["Resources"].(map[string]any)
	tbl, _ := res["Table"].(map[string]any)
	props, _ := tbl["Properties"].(map[string]any)
	rp, ok := props["ResourcePolicy"].(map[string]any)
	require.True(t, ok, "the table has a ResourcePolicy")
	return parseStatements(t, "Table/ResourcePolicy", rp["PolicyDocument"])
}

// Callers of the policy tests. Operator roles come from OperatorRoleNames of required.
var (
	adminRole       = role(testAccount, "Admin")
	operatorRole    = role(testAccount, testOperatorRole)
	ssoOperatorRole = role(testAccount, "aws-reserved/sso.amazonaws.com/eu-west-1/AWSReservedSSO_PlatformAdmin_0123456789abcdef")
	otherAccount    = "210987654321"
)

func TestQueuePolicyDeniesSendMessageToAllButTheStacksSenders(t *testing.T) {
	s := loadStack(t, fullConfig) // every rule, and the hook role (LifecycleHookRoute Both)
	for _, q := range []string{"Queue", "WakeUpQueue"} {
		t.Run(q, func(t *testing.T) { queuePolicyDenies(t, s, q) })
	}
}

// queuePolicyDenies checks the policy of queue q against every caller: the rules of the stack that target
// q, the hook role (Queue only) and the operator roles are spared, everyone else is denied.
func queuePolicyDenies(t *testing.T, s *stack, q string) {
	sts := s.queuePolicy(t, q)
	queue := arnOf(q)
	hookRole := arnOf("LifecycleHookRole")
	events := func(rule string) caller { return caller{service: "events.amazonaws.com", sourceArn: rule} }

	// The hook role's own policy allows the send to the queue; the policy of the queue must not deny it. It
	// sends lifecycle actions, never wake-ups: the wake-up queue does not spare it.
	hookToQueue := q == "Queue"
	require.Equal(t, hookToQueue, allows(t, s.roleStatements(t, "LifecycleHookRole"), request{"sqs:SendMessage", queue, nil}),
		"LifecycleHookRole may send to the queue only")

	cases := []struct {
		name   string
		caller caller
		denied bool
	}{
		{"the hook role Auto Scaling assumes", caller{roleArn: hookRole}, !hookToQueue},
		{"an operator role (redrive from the DLQ)", caller{roleArn: operatorRole}, false},
		{"an IAM Identity Center operator role, with its path and suffix", caller{roleArn: ssoOperatorRole}, false},
		{"an administrator of the account", caller{roleArn: adminRole}, true},
		{"the agent's own task role (it never sends)", caller{roleArn: arnOf("TaskRole")}, true},
		{"a role named like an operator in another account", caller{roleArn: role(otherAccount, testOperatorRole)}, true},
		{"a role whose name only starts like an operator's", caller{roleArn: role(testAccount, testOperatorRole+"-old")}, true},
		{"an EventBridge rule of another stack", events("arn:aws:events:us-east-1:" + testAccount + ":rule/other"), true},
		{"an EventBridge rule of another account", events("arn:aws:events:us-east-1:" + otherAccount + ":rule/x"), true},
		{"an SNS topic (the stack subscribes none)", caller{service: "sns.amazonaws.com", sourceArn: "arn:aws:sns:us-east-1:" + testAccount + ":t"}, true},
	}
	for _, id := range s.resourcesOfType("AWS::Events::Rule") {
		cases = append(cases, struct {
			name   string
			caller caller
			denied bool
		}{"rule " + id + " of this stack", events(arnOf(id)), queueOfRule(id) != q})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.denied, deniedByResourcePolicy(t, sts, c.caller, "sqs:SendMessage", queue), "%+v", c.caller)
			if c.caller.service != "" && !c.denied {
				require.True(t, allowedByResourcePolicy(t, sts, c.caller, "sqs:SendMessage", queue), "the queue policy admits it")
			}
		})
	}

	t.Run("the agent still receives, deletes and extends visibility", func(t *testing.T) {
		for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:DeleteMessageBatch", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"} {
			require.False(t, deniedByResourcePolicy(t, sts, caller{roleArn: arnOf("TaskRole")}, a, queue), a)
			require.True(t, allows(t, s.roleStatements(t, "TaskRole"), request{a, queue, nil}), a)
		}
	})
	t.Run("the dead-letter queue has no policy to get in the way of the redrive", func(t *testing.T) {
		for _, p := range s.tpl.GetAllSQSQueuePolicyResources() {
			require.NotContains(t, p.Queues, refTo("DeadLetterQueue"))
		}
	})
}

func TestQueuePolicyExceptionsFollowTheConfiguration(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			s := loadStack(t, c.params)
			for _, q := range []string{"WakeUpQueue", "Queue"} {
				sts := s.queuePolicy(t, q)
				var deny *statement
				for i := range sts {
					if sts[i].where == queuePolicies[q]+"#OnlyTheStacksSenders" {
						deny = &sts[i]
					}
				}
				require.NotNil(t, deny, "statement OnlyTheStacksSenders")
				require.Equal(t, []string{"sqs:SendMessage"}, deny.actions)
				require.Equal(t, []string{arnOf(q)}, deny.resources)

				var rules []string
				for _, id := range s.resourcesOfType("AWS::Events::Rule") {
					if queueOfRule(id) == q {
						rules = append(rules, arnOf(id))
					}
				}
				require.ElementsMatch(t, rules, deny.conditions["ArnNotEquals"]["aws:SourceArn"], "exactly the rules of the stack that target %s are spared", q)
				var principals []string
				if s.conditions["LifecycleViaQueueTarget"] && q == "Queue" {
					principals = []string{arnOf("LifecycleHookRole")}
				}
				require.Equal(t, principals, deny.conditions["ArnNotEquals"]["aws:PrincipalArn"], "the hook role is spared when the stack creates it")
				require.ElementsMatch(t, []string{
					"arn:*:iam::*:role/" + testOperatorRole, "arn:*:iam::*:role/" + testSSOOperatorRoles,
					"arn:*:iam::*:role/*/" + testOperatorRole, "arn:*:iam::*:role/*/" + testSSOOperatorRoles,
				}, deny.conditions["ArnNotLike"]["aws:PrincipalArn"], "the operator roles by name, with or without a path")

				if !s.conditions["LifecycleViaQueueTarget"] || q == "WakeUpQueue" {
					require.True(t, deniedByResourcePolicy(t, sts, caller{roleArn: role(testAccount, "LifecycleHookRole")}, "sqs:SendMessage", arnOf(q)),
						"no hook role is spared for it here")
				}
			}
		})
	}
}

// tableWrites are the actions that change items (Amazon DynamoDB Developer Guide, "Using IAM with DynamoDB
// transactions": TransactWriteItems is authorized as the PutItem, UpdateItem and DeleteItem it holds).
var tableWrites = []string{
	"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem",
	"dynamodb:PartiQLInsert", "dynamodb:PartiQLUpdate", "dynamodb:PartiQLDelete",
}

func TestTablePolicyDeniesWritesToAllButTheAgentAndOperators(t *testing.T) {
	s := loadStack(t, defaultConfig)
	sts := s.tablePolicy(t)
	table := arnOf("Table")
	for _, st := range sts {
		require.Equalf(t, "Deny", st.effect, "%s: the table policy only denies (grants stay in identity policies)", st.where)
		require.ElementsMatchf(t, tableWrites, st.actions, "%s: every item write, nothing else", st.where)
		require.Equalf(t, []string{"*"}, st.resources, "%s: the table the policy is attached to", st.where)
	}
	require.True(t, allows(t, s.roleStatements(t, "TaskRole"), request{"dynamodb:PutItem", table, nil}), "the task role writes the table")

	cases := []struct {
		name   string
		caller caller
		denied bool
	}{
		{"the agent's task role", caller{roleArn: arnOf("TaskRole")}, false},
		{"an operator role (pause, approve, rollback)", caller{roleArn: operatorRole}, false},
		{"an operator role with a path", caller{roleArn: role(testAccount, "ops/"+testOperatorRole)}, false},
		{"an IAM Identity Center operator role", caller{roleArn: ssoOperatorRole}, false},
		{"an administrator of the account", caller{roleArn: adminRole}, true},
		{"a user of the account", caller{roleArn: "arn:aws:iam::" + testAccount + ":user/alice"}, true},
		{"a role named like an operator in another account", caller{roleArn: role(otherAccount, testOperatorRole)}, true},
		{"an SSO role of another permission set", caller{roleArn: role(testAccount, "aws-reserved/sso.amazonaws.com/AWSReservedSSO_ReadOnly_0123")}, true},
		{"a service principal", caller{service: "lambda.amazonaws.com", sourceArn: "arn:aws:lambda:us-east-1:" + testAccount + ":function:f"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, a := range tableWrites {
				require.Equal(t, c.denied, deniedByResourcePolicy(t, sts, c.caller, a, table), "%s by %+v", a, c.caller)
			}
			for _, a := range []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan", "dynamodb:DescribeTable"} {
				require.False(t, deniedByResourcePolicy(t, sts, c.caller, a, table), "reads stay open: %s", a)
			}
		})
	}
}

func TestTaskRoleAllowsOptedInGroupsExactlyAsTheAgentDecides(t *testing.T) {
	s := loadStack(t, defaultConfig)
	sts := s.roleStatements(t, "TaskRole")
	group := "arn:aws:autoscaling:" + testRegion + ":" + testAccount + ":autoScalingGroup:0b1c2d3e:autoScalingGroupName/g"
	for _, v := range []string{"true", "True", "TRUE", "tRuE", " true ", "true ", "yes", "1", "", "false", "False"} {
		on, _ := model.OptedIn(map[string]string{model.TagEnabled: v})
		for _, a := range []string{"autoscaling:StartInstanceRefresh", "autoscaling:CompleteLifecycleAction", "autoscaling:CancelInstanceRefresh"} {
			require.Equal(t, on, allows(t, sts, request{a, group, map[string]string{optInTagKey: v}}),
				"%s with %s=%q: IAM and lifecycle.OptedIn must agree", a, model.TagEnabled, v)
		}
	}
}

var placeholder = regexp.MustCompile(`(?:Ref|GetAtt):([A-Za-z0-9]+)`)

// TestResourcesReferenceEachOtherWithoutACycle: the table's resource policy names the task role, so the task
// role must not name the table (CloudFormation refuses a circular dependency).
func TestResourcesReferenceEachOtherWithoutACycle(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			s := loadStack(t, c.params)
			res, _ := s.raw["Resources"].(map[string]any)
			deps := map[string][]string{}
			for id, r := range res {
				m, _ := r.(map[string]any)
				var refs []string
				collect(m["Properties"], func(str string) {
					for _, sub := range placeholder.FindAllStringSubmatch(str, -1) {
						refs = append(refs, sub[1])
					}
				})
				switch d := m["DependsOn"].(type) {
				case string:
					refs = append(refs, d)
				case []any:
					for _, e := range d {
						refs = append(refs, e.(string))
					}
				}
				sort.Strings(refs)
				deps[id] = slices.Compact(refs)
			}
			require.Contains(t, deps["Table"], "TaskRole", "the table policy names the task role")
			require.NotContains(t, deps["TaskRole"], "Table")
			state := map[string]int{}
			var visit func(id string, path []string)
			visit = func(id string, path []string) {
				switch state[id] {
				case 1:
					t.Fatalf("circular dependency: %s", strings.Join(append(path, id), " -> "))
				case 2:
					return
				}
				state[id] = 1
				for _, d := range deps[id] {
					visit(d, append(path, id))
				}
				state[id] = 2
			}
			for _, id := range keys(deps) {
				visit(id, nil)
			}
		})
	}
}

// collect calls f on every string in a JSON value.
func collect(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case map[string]any:
		for _, e := range x {
			collect(e, f)
		}
	case []any:
		for _, e := range x {
			collect(e, f)
		}
	}
}
