package cfntest

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/intrinsics"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// templatePath is the template under test, relative to this package.
const templatePath = "../../cloudformation/patch-agent.yaml"

// Values of the pseudo parameters as goformation resolves them (intrinsics.Ref), and the one it lacks.
const (
	testRegion    = "us-east-1"
	testAccount   = "123456789012"
	testPartition = "aws"
)

// Test values of the AMI parameters, shared with the EventBridge fixtures: the update of
// /golden-ami/ecs/al2023 matches both the names and the prefix, MyExampleParameter (create, delete) and
// MyGoldenAMI (the validation exception) match the names only.
const (
	testParameterNames  = "/golden-ami/ecs/al2023,MyExampleParameter,MyGoldenAMI"
	testParameterPrefix = "/golden-ami/"
)

// required gives the parameters without a default, as `aws cloudformation deploy --parameter-overrides`
// would: lists comma-separated.
var required = map[string]string{
	"AgentImage":        testAccount + ".dkr.ecr.us-east-1.amazonaws.com/patch-agent:test",
	"InstanceRoleNames": "ecsInstanceRole,eks-nodes",
	// Names and a pattern: the ECS clusters whose container instances may be drained.
	"EcsClusterNames": "prod,staging-*",
	// A plain role name and an IAM Identity Center role, whose random suffix differs in every account.
	"OperatorRoleNames": testOperatorRole + "," + testSSOOperatorRoles,
}

// testSSMParameters is the Parameter Store of the test account: CloudFormation resolves the SSM parameter
// types (AWS::SSM::Parameter::Value<...>) from it when the stack is created.
var testSSMParameters = map[string]string{
	"/patch-agent/network/subnet-ids":         "subnet-0123456789abcdef0,subnet-0fedcba9876543210",
	"/patch-agent/network/security-group-ids": "sg-0123456789abcdef0",
}

// Operator roles of the tests (OperatorRoleNames).
const (
	testOperatorRole     = "patch-agent-operator"
	testSSOOperatorRoles = "AWSReservedSSO_PlatformAdmin_*"
)

// Configurations of the stack the tests deploy the template with (each adds to required).
var (
	// fullConfig switches every optional part on: named and prefixed AMI parameters, lifecycle actions through
	// EventBridge and through the queue as hook target, an alarm topic, two replicas.
	fullConfig = map[string]string{
		"AMIParameterNames":  testParameterNames,
		"AMIParameterPrefix": testParameterPrefix,
		"LifecycleHookRoute": "Both",
		"AlarmTopicArn":      "arn:aws:sns:us-east-1:" + testAccount + ":ops",
		"DesiredCount":       "2",
	}
	// defaultConfig takes every default: no AMI parameter of your own (public parameters only), lifecycle
	// actions through EventBridge.
	defaultConfig = map[string]string{}
	// queueTargetConfig: hooks name the queue as their notification target; a prefix and no names.
	queueTargetConfig = map[string]string{
		"AMIParameterPrefix": testParameterPrefix,
		"LifecycleHookRoute": "QueueTarget",
	}
	// namedHooksConfig: the lifecycle rule narrowed to the agent's hooks (LifecycleHookNames).
	namedHooksConfig = map[string]string{
		"LifecycleHookNames": "patch-agent-drain,patch-agent-launch",
	}
)

// configs names the configurations for table-driven tests.
var configs = []struct {
	name   string
	params map[string]string
}{
	{"full", fullConfig},
	{"defaults", defaultConfig},
	{"queue target and prefix", queueTargetConfig},
	{"named lifecycle hooks", namedHooksConfig},
}

// stack is the template as CloudFormation would create it with given parameter values: resources and outputs
// whose condition is false are gone, intrinsic functions are resolved, AWS::NoValue is removed. What cannot
// be known before deployment is a placeholder: "Ref:Logical" for a Ref to a resource, "GetAtt:Logical.Attr".
type stack struct {
	tpl        *cloudformation.Template
	conditions map[string]bool
	// raw is the resolved template as JSON values (the typed template drops what goformation does not model).
	raw map[string]any
}

func refTo(logical string) string        { return "Ref:" + logical }
func getAtt(logical, attr string) string { return "GetAtt:" + logical + "." + attr }
func arnOf(logical string) string        { return getAtt(logical, "Arn") }
func withRequired(p map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range required {
		out[k] = v
	}
	for k, v := range p {
		out[k] = v
	}
	return out
}

// noValue marks AWS::NoValue until it is removed; a nil left after resolution is an intrinsic function the
// loader could not resolve.
const noValue = "\x00AWS::NoValue"

// loadStack parses the template with goformation for the given parameter values (plus required).
func loadStack(t testing.TB, params map[string]string) *stack {
	t.Helper()
	return loadStackFrom(t, templatePath, withRequired(params))
}

// loadStackFrom parses the template at path with goformation for exactly the given parameter values.
func loadStackFrom(t testing.TB, path string, given map[string]string) *stack {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)

	// Short-form tags (!Ref, !Sub ...) to long form, nothing resolved yet.
	longForm, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	require.NoError(t, err, "template is not valid YAML")
	var raw map[string]any
	require.NoError(t, json.Unmarshal(longForm, &raw))

	overrides := parameterValues(t, raw, given)
	resources, _ := raw["Resources"].(map[string]any)
	require.NotEmpty(t, resources, "template has no Resources")
	// Every declared resource may be named, also in the branch of an Fn::If not taken (goformation resolves
	// both branches before the Fn::If handler picks one), as CloudFormation allows.
	declared := map[string]bool{}
	for id := range resources {
		declared[id] = true
	}

	var problems []string
	conditions := map[string]bool{}
	handlers := resolvers(declared, conditions, &problems)

	// Pass 1: the conditions. goformation evaluates them (EvaluateConditions) from the parameter overrides.
	condDoc, err := json.Marshal(map[string]any{"Parameters": raw["Parameters"], "Conditions": raw["Conditions"]})
	require.NoError(t, err)
	evaluated, err := intrinsics.ProcessJSON(condDoc, &intrinsics.ProcessorOptions{
		ParameterOverrides: overrides, EvaluateConditions: true, IntrinsicHandlerOverrides: handlers,
	})
	require.NoError(t, err)
	var condOut struct {
		Conditions map[string]any `json:"Conditions"`
	}
	require.NoError(t, json.Unmarshal(evaluated, &condOut))
	for name, v := range condOut.Conditions {
		b, ok := v.(bool)
		require.Truef(t, ok, "condition %s did not evaluate to a boolean (goformation returned %v): the loader cannot resolve it", name, v)
		conditions[name] = b
	}

	// Pass 2: drop what the conditions switch off, as CloudFormation does, then resolve everything else.
	for _, section := range []string{"Resources", "Outputs"} {
		m, _ := raw[section].(map[string]any)
		for name, v := range m {
			entry, _ := v.(map[string]any)
			cond, has := entry["Condition"].(string)
			if !has {
				continue
			}
			on, known := conditions[cond]
			require.Truef(t, known, "%s %s names unknown condition %s", section, name, cond)
			if !on {
				delete(m, name)
				continue
			}
			delete(entry, "Condition") // decided: nothing left to switch
		}
	}
	doc, err := json.Marshal(raw)
	require.NoError(t, err)
	resolved, err := intrinsics.ProcessJSON(doc, &intrinsics.ProcessorOptions{
		ParameterOverrides: overrides, IntrinsicHandlerOverrides: handlers,
	})
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(resolved, &out))
	out = dropNoValue(out, "", &problems)
	require.Emptyf(t, problems, "intrinsic functions the loader could not resolve:\n%s", strings.Join(problems, "\n"))

	final, err := json.Marshal(out)
	require.NoError(t, err)
	tpl, err := goformation.ParseJSONWithOptions(final, &intrinsics.ProcessorOptions{NoProcess: true})
	require.NoError(t, err, "goformation cannot read the resolved template")
	require.NotNil(t, tpl)
	return &stack{tpl: tpl, conditions: conditions, raw: out.(map[string]any)}
}

// parameterValues returns a value for every template parameter: the given one, else the default, converted as
// CloudFormation converts it for Ref (lists split on commas, numbers as numbers). A parameter without either
// fails the test.
func parameterValues(t testing.TB, raw map[string]any, given map[string]string) map[string]any {
	t.Helper()
	params, _ := raw["Parameters"].(map[string]any)
	for name := range given {
		require.Containsf(t, params, name, "test gives parameter %s that the template does not declare", name)
	}
	values := map[string]any{}
	for name, v := range params {
		p, _ := v.(map[string]any)
		typ, _ := p["Type"].(string)
		s, ok := given[name]
		if !ok {
			def, has := p["Default"]
			require.Truef(t, has, "parameter %s has no default and the test gives no value", name)
			s = fmt.Sprint(def)
		}
		if allowed, ok := p["AllowedValues"].([]any); ok {
			var as []string
			for _, a := range allowed {
				as = append(as, fmt.Sprint(a))
			}
			require.Containsf(t, as, s, "parameter %s: %q is not among its AllowedValues", name, s)
		}
		if pattern, ok := p["AllowedPattern"].(string); ok {
			require.Regexpf(t, "^(?:"+pattern+")$", s, "parameter %s: %q does not match its AllowedPattern", name, s)
		}
		if inner, ok := strings.CutPrefix(typ, "AWS::SSM::Parameter::Value<"); ok {
			v, found := testSSMParameters[s]
			require.Truef(t, found, "parameter %s names SSM parameter %q, which the test account does not hold", name, s)
			typ, s = strings.TrimSuffix(inner, ">"), v
		}
		switch {
		case typ == "CommaDelimitedList" || strings.HasPrefix(typ, "List<"):
			var list []any
			for _, e := range strings.Split(s, ",") { // "" gives [""], as in CloudFormation
				list = append(list, strings.TrimSpace(e))
			}
			values[name] = list
		case typ == "Number":
			n, err := strconv.ParseFloat(s, 64)
			require.NoErrorf(t, err, "parameter %s is a Number", name)
			values[name] = n
		default:
			values[name] = s
		}
	}
	return values
}

var subVariable = regexp.MustCompile(`\$\{([^}]+)\}`)

// resolvers returns the intrinsic handlers that differ from goformation's defaults: Ref knows AWS::Partition
// and answers a placeholder for resources, Fn::GetAtt answers a placeholder, Fn::Sub resolves pseudo
// parameters, parameters and attributes in both forms, Fn::If reads the conditions of pass 1. Every handler
// reports what it cannot resolve in problems.
func resolvers(declared map[string]bool, conditions map[string]bool, problems *[]string) map[string]intrinsics.IntrinsicHandler {
	fail := func(format string, a ...any) any {
		*problems = append(*problems, fmt.Sprintf(format, a...))
		return nil
	}
	ref := func(_ string, input, tpl any) any {
		name, ok := input.(string)
		if !ok {
			return fail("Ref of %v", input)
		}
		switch name {
		case "AWS::Partition":
			return testPartition
		case "AWS::URLSuffix":
			return "amazonaws.com"
		case "AWS::NoValue":
			return noValue
		}
		if declared[name] {
			return refTo(name)
		}
		v := intrinsics.Ref("Ref", name, tpl)
		if v == nil {
			return fail("Ref %s: no such parameter or resource", name)
		}
		return v
	}
	att := func(_ string, input, _ any) any {
		var parts []string
		switch v := input.(type) {
		case string:
			parts = strings.SplitN(v, ".", 2)
		case []any:
			for _, p := range v {
				s, _ := p.(string)
				parts = append(parts, s)
			}
		}
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			return fail("Fn::GetAtt %v", input)
		}
		if !declared[parts[0]] {
			return fail("Fn::GetAtt of unknown resource %s", parts[0])
		}
		return getAtt(parts[0], parts[1])
	}
	return map[string]intrinsics.IntrinsicHandler{
		"Ref":        ref,
		"Fn::GetAtt": att,
		"Fn::Sub": func(_ string, input, tpl any) any {
			var text string
			vars := map[string]any{}
			switch v := input.(type) {
			case string:
				text = v
			case []any:
				if len(v) != 2 {
					return fail("Fn::Sub %v", input)
				}
				text, _ = v[0].(string)
				vars, _ = v[1].(map[string]any)
			}
			return subVariable.ReplaceAllStringFunc(text, func(m string) string {
				name := m[2 : len(m)-1]
				var val any
				switch {
				case strings.HasPrefix(name, "!"):
					return "${" + name[1:] + "}"
				case vars[name] != nil:
					val = vars[name]
				case strings.Contains(name, "."):
					val = att("", name, tpl)
				default:
					val = ref("", name, tpl)
				}
				s, ok := val.(string)
				if !ok {
					fail("Fn::Sub %q: ${%s} is %v, not a string", text, name, val)
				}
				return s
			})
		},
		// goformation's Fn::Split returns []string, which its Fn::Select and Fn::Join do not take as a list:
		// this one returns []any, so that a split can be selected from or joined as in CloudFormation.
		"Fn::Split": func(_ string, input, _ any) any {
			v, ok := input.([]any)
			if !ok || len(v) != 2 {
				return fail("Fn::Split %v", input)
			}
			delim, ok1 := v[0].(string)
			text, ok2 := v[1].(string)
			if !ok1 || !ok2 || delim == "" {
				return fail("Fn::Split %v: a delimiter and a string", input)
			}
			var out []any
			for _, part := range strings.Split(text, delim) {
				out = append(out, part)
			}
			return out
		},
		"Fn::If": func(_ string, input, _ any) any {
			v, ok := input.([]any)
			if !ok || len(v) != 3 {
				return fail("Fn::If %v", input)
			}
			name, _ := v[0].(string)
			on, known := conditions[name]
			if !known {
				return fail("Fn::If of unknown condition %v", v[0])
			}
			if on {
				return v[1]
			}
			return v[2]
		},
	}
}

// dropNoValue removes AWS::NoValue from lists and objects (as CloudFormation does) and reports every nil: an
// intrinsic function goformation could not resolve.
func dropNoValue(v any, path string, problems *[]string) any {
	switch x := v.(type) {
	case nil:
		*problems = append(*problems, "unresolved value at "+path)
	case map[string]any:
		for k, e := range x {
			if e == noValue {
				delete(x, k)
				continue
			}
			x[k] = dropNoValue(e, path+"/"+k, problems)
		}
	case []any:
		out := x[:0]
		for i, e := range x {
			if e == noValue {
				continue
			}
			out = append(out, dropNoValue(e, fmt.Sprintf("%s/%d", path, i), problems))
		}
		return out
	}
	return v
}

// resourcesOfType returns the logical ids of the resources of a type, sorted.
func (s *stack) resourcesOfType(typ string) []string {
	var ids []string
	for id, r := range s.tpl.Resources {
		if r.AWSCloudFormationType() == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func TestTemplateResolvesInEveryConfiguration(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			s := loadStack(t, c.params)
			require.NotEmpty(t, s.tpl.Resources)
			for _, out := range []string{"QueueUrl", "QueueArn", "TableName", "DeadLetterQueueUrl", "TaskRoleArn"} {
				require.Containsf(t, s.tpl.Outputs, out, "output %s", out)
			}
		})
	}
}

func TestConditionsSwitchTheOptionalParts(t *testing.T) {
	cases := []struct {
		name    string
		params  map[string]string
		present []string
		absent  []string
	}{
		{"full", fullConfig,
			[]string{"ParameterNamesRule", "ParameterPrefixRule", "LifecycleActionRule", "LifecycleHookRole", "NamedAMIParametersPolicy", "PrefixAMIParametersPolicy"}, nil},
		{"defaults", defaultConfig,
			[]string{"ScheduleRule", "LifecycleActionRule"},
			[]string{"ParameterNamesRule", "ParameterPrefixRule", "LifecycleHookRole", "NamedAMIParametersPolicy", "PrefixAMIParametersPolicy", "LifecycleNamedHooksRule"}},
		{"queue target and prefix", queueTargetConfig,
			[]string{"ParameterPrefixRule", "LifecycleHookRole", "PrefixAMIParametersPolicy"},
			[]string{"ParameterNamesRule", "LifecycleActionRule", "LifecycleNamedHooksRule", "NamedAMIParametersPolicy"}},
		{"named lifecycle hooks", namedHooksConfig, []string{"LifecycleNamedHooksRule"}, []string{"LifecycleActionRule"}},
		{"named lifecycle hooks, queue target", map[string]string{"LifecycleHookNames": "patch-agent-drain", "LifecycleHookRoute": "QueueTarget"},
			[]string{"LifecycleHookRole"}, []string{"LifecycleActionRule", "LifecycleNamedHooksRule"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := loadStack(t, c.params)
			for _, id := range c.present {
				require.Containsf(t, s.tpl.Resources, id, "resource %s", id)
			}
			for _, id := range c.absent {
				require.NotContainsf(t, s.tpl.Resources, id, "resource %s", id)
			}
		})
	}
}
