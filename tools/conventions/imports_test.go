package conventions

import (
	"bufio"
	"bytes"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/patch-agent/patch-agent/"

// awsServiceClient matches an AWS SDK service client package (autoscaling, ec2, ...), not its data types
// (.../service/autoscaling/types): a package importing one can call AWS.
var awsServiceClient = regexp.MustCompile(`^github\.com/aws/aws-sdk-go-v2/service/[a-z0-9]+$`)

// awsService matches any AWS SDK service package, data types included.
var awsService = regexp.MustCompile(`^github\.com/aws/aws-sdk-go-v2/service/`)

// importRule forbids the packages a product package may not import (non-test imports, as `go list` reports
// them). The arrows of docs/architecture.md, "Packages": cmd -> agent -> {engine, lifecycleaction} ->
// providers -> awsapi; everyone may use model and state.
type importRule struct {
	// Package is the import path below the module ("internal/engine").
	Package string
	// Forbidden are import paths below the module (a prefix: "internal/agent" forbids its subpackages too).
	Forbidden []string
	// ForbiddenRE forbids import paths it matches (outside the module: the AWS SDK).
	ForbiddenRE *regexp.Regexp
	// OnlyAWSServices, when set, lists the only AWS SDK service client packages the package may import
	// ("autoscaling", "sts"); their data types are not limited.
	OnlyAWSServices []string
	// OnlyModule, when set, lists the only packages of the module the package may depend on at all, directly
	// or through another package (`go list -deps`): a prefix, as Forbidden.
	OnlyModule []string
	// Why is said when the rule is broken.
	Why string
}

var importRules = []importRule{
	{Package: "internal/model",
		Forbidden:   []string{"internal/providers", "internal/engine", "internal/lifecycleaction", "internal/agent", "internal/awsapi"},
		ForbiddenRE: awsServiceClient,
		OnlyModule:  []string{"internal/model", "internal/state"},
		Why:         "the model does no I/O: a call to AWS or a decision belongs in a provider or the engine"},
	{Package: "internal/providers",
		Forbidden: []string{"internal/engine", "internal/lifecycleaction", "internal/agent"},
		Why:       "providers answer what AWS says; what to do with it is decided by the engine and the lifecycle actions"},
	{Package: "internal/engine",
		Forbidden:   []string{"internal/lifecycleaction", "internal/agent"},
		ForbiddenRE: awsService,
		Why:         "the rollout engine says what to do through providers (model.Inputs, providers.Refreshes, ...) and does not reach into the lifecycle actions"},
	{Package: "internal/lifecycleaction",
		Forbidden:   []string{"internal/engine", "internal/agent"},
		ForbiddenRE: awsServiceClient,
		Why:         "lifecycle actions call AWS through providers.LifecycleActions and never drive a rollout"},
	{Package: "internal/agent",
		ForbiddenRE: awsService,
		Why:         "the agent wires and schedules: every AWS call of a rollout or a lifecycle action goes through providers"},
	{Package: "internal/operator",
		Forbidden:       []string{"internal/engine", "internal/lifecycleaction", "internal/agent", "internal/providers", "internal/cli"},
		OnlyAWSServices: []string{"autoscaling", "sts"},
		Why:             "the operator's commands write the store and import no AWS SDK client but Auto Scaling's (to confirm a group) and STS's (who approves); internal/awsapi's interfaces are not limited by this rule"},
	{Package: "internal/cli/orgcmd",
		Forbidden: []string{"internal/cli/operate", "internal/cli/runcmd"},
		Why:       "the operator's commands (status, pause, resume) take the organization-wide forms, not the other way round"},
	{Package: "internal/cli/runcmd",
		Forbidden: []string{"internal/cli/operate", "internal/cli/orgcmd"},
		Why:       "run and healthcheck are the agent's own commands and need none of the operator's"},
}

// onlyAgentImports are the packages that only internal/agent (the wiring) may import among the product's: the
// engine and the lifecycle actions decide; what other packages need of them (constants, defaults, pure
// judgements) lives in the model.
var onlyAgentImports = []string{"internal/engine", "internal/lifecycleaction"}

// cliPackages is the command line below cmd/patch-agent: its plumbing (internal/cli) and its commands
// (internal/cli/operate, orgcmd, runcmd). No other package of internal/ imports it (cmd/patch-agent wires it);
// the plumbing imports none of the commands.
const cliPackages = "internal/cli"

// testWorld are the packages of the simulated account and the test harnesses: the production binary
// (cmd/patch-agent built with -tags nodemo) links none of them.
var testWorld = []string{"internal/sim", "internal/testworld", "internal/demo", "internal/testenv", "internal/org/orgsim", "internal/audit/fleet"}

// under reports whether import path p is the module package prefix or one of its subpackages.
func under(p, prefix string) bool {
	return p == module+prefix || strings.HasPrefix(p, module+prefix+"/")
}

// importViolations returns one line per import a rule forbids, for packages given as import path -> imports
// (deps: import path -> every package it depends on, for the rules with OnlyModule), per product package
// other than internal/agent that imports one of onlyAgentImports, per package outside the command line that
// imports it, and per import of a command by the command line's plumbing.
func importViolations(imports, deps map[string][]string, rules []importRule) []string {
	var out []string
	for p, imps := range imports {
		if strings.HasSuffix(p, "_test") {
			continue
		}
		for _, imp := range imps {
			switch {
			case under(imp, cliPackages) && strings.HasPrefix(p, module+"internal/") && !under(p, cliPackages):
				out = append(out, strings.TrimPrefix(p, module)+" imports "+imp+": the command line is cmd/patch-agent's; "+
					"what a product package needs of it belongs in the product package")
			case p == module+cliPackages && under(imp, cliPackages) && imp != p:
				out = append(out, strings.TrimPrefix(p, module)+" imports "+imp+": the command line's plumbing serves the "+
					"commands and imports none of them")
			}
		}
	}
	for p, imps := range imports {
		product := strings.HasPrefix(p, module+"internal/") || strings.HasPrefix(p, module+"cmd/")
		if !product || under(p, "internal/agent") || inTestWorld(p) || strings.HasSuffix(p, "_test") {
			continue
		}
		for _, imp := range imps {
			for _, o := range onlyAgentImports {
				if under(imp, o) && !under(p, o) {
					out = append(out, strings.TrimPrefix(p, module)+" imports "+imp+": only internal/agent wires the engine and the lifecycle actions; move what it needs into internal/model")
				}
			}
		}
	}
	for _, r := range rules {
		for _, dep := range deps[module+r.Package] {
			if !strings.HasPrefix(dep, module) || len(r.OnlyModule) == 0 {
				continue
			}
			allowed := false
			for _, o := range r.OnlyModule {
				allowed = allowed || under(dep, o)
			}
			if !allowed {
				out = append(out, r.Package+" depends on "+dep+" (directly or through another package): "+r.Why)
			}
		}
		for _, imp := range imports[module+r.Package] {
			bad := r.ForbiddenRE != nil && r.ForbiddenRE.MatchString(imp)
			if r.OnlyAWSServices != nil && awsServiceClient.MatchString(imp) {
				bad = bad || !slices.Contains(r.OnlyAWSServices, strings.TrimPrefix(imp, "github.com/aws/aws-sdk-go-v2/service/"))
			}
			for _, f := range r.Forbidden {
				if imp == module+f || strings.HasPrefix(imp, module+f+"/") {
					bad = true
				}
			}
			if bad {
				out = append(out, r.Package+" imports "+imp+": "+r.Why)
			}
		}
	}
	sort.Strings(out)
	return out
}

// inTestWorld reports whether import path p is a package of the test world.
func inTestWorld(p string) bool {
	for _, w := range testWorld {
		if under(p, w) {
			return true
		}
	}
	return false
}

// goList runs `go list` with args in the module root and returns import path -> imports, one package per line.
func goList(t *testing.T, args ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-f", `{{.ImportPath}} {{join .Imports " "}}`}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list %v: %s", args, stderr.String()) // an import cycle is reported here
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkgs[f[0]] = f[1:]
	}
	require.NoError(t, sc.Err())
	return pkgs
}

// TestProductImportRules lists every package's non-test imports with `go list` and fails on an import a rule
// of importRules forbids, and when the production build links a package of the test world.
func TestProductImportRules(t *testing.T) {
	pkgs := goList(t, "./...")
	deps := map[string][]string{}
	for _, r := range importRules {
		require.Contains(t, pkgs, module+r.Package, "a rule names %s, which is gone", r.Package)
		if len(r.OnlyModule) > 0 {
			deps[module+r.Package] = slices.Sorted(maps.Keys(goListDeps(t, "./"+r.Package)))
		}
	}
	require.Empty(t, importViolations(pkgs, deps, importRules))

	for p := range goListDeps(t, "-tags", "nodemo", "./cmd/patch-agent") {
		require.False(t, inTestWorld(p), "the production build (-tags nodemo) links %s, a package of the test world", p)
	}
}

// goListDeps returns every package the packages named by args depend on, themselves included.
func goListDeps(t *testing.T, args ...string) map[string][]string {
	t.Helper()
	return goList(t, append([]string{"-deps"}, args...)...)
}

// TestImportRulesRejectAForbiddenImport shows each kind of forbidden import rejected: an arrow backwards, an
// SDK client in the model, an SDK data type in the engine, a package other than the agent importing the
// engine, the model depending on the queue consumer through another package, a product package importing
// the command line, the command line's plumbing importing a command, and the operator's logic calling a
// service other than Auto Scaling and STS; the allowed ones (cmd/patch-agent
// and the commands importing the command line, operate importing orgcmd) let through.
func TestImportRulesRejectAForbiddenImport(t *testing.T) {
	pkgs := map[string][]string{
		module + "internal/model":           {"time", "github.com/aws/aws-sdk-go-v2/service/autoscaling/types", "github.com/aws/aws-sdk-go-v2/service/ec2"},
		module + "internal/providers":       {module + "internal/model", module + "internal/engine"},
		module + "internal/engine":          {module + "internal/providers", "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"},
		module + "internal/lifecycleaction": {module + "internal/providers", module + "internal/agent/sub"},
	}
	pkgs[module+"internal/metrics"] = []string{module + "internal/engine", module + "internal/model"}
	pkgs[module+"internal/events"] = []string{module + "internal/cli"}
	pkgs[module+"internal/cli"] = []string{module + "internal/cli/operate", module + "internal/state"}
	pkgs[module+"internal/cli/orgcmd"] = []string{module + "internal/cli", module + "internal/cli/operate"}
	pkgs[module+"internal/cli/operate"] = []string{module + "internal/cli", module + "internal/cli/orgcmd"}
	pkgs[module+"cmd/patch-agent"] = []string{module + "internal/cli", module + "internal/cli/operate"}
	pkgs[module+"internal/operator"] = []string{"github.com/aws/aws-sdk-go-v2/service/autoscaling", "github.com/aws/aws-sdk-go-v2/service/sqs",
		"github.com/aws/aws-sdk-go-v2/service/sqs/types", "github.com/aws/aws-sdk-go-v2/service/sts"}
	deps := map[string][]string{module + "internal/model": {"time", module + "internal/model", module + "internal/state", module + "internal/events"}}
	got := importViolations(pkgs, deps, importRules)
	require.Len(t, got, 11, "%v", got)
	want := []string{
		"internal/cli imports " + module + "internal/cli/operate: the command line's plumbing",
		"internal/cli/orgcmd imports " + module + "internal/cli/operate: the operator's commands",
		"internal/engine imports github.com/aws/aws-sdk-go-v2/service/autoscaling/types",
		"internal/events imports " + module + "internal/cli: the command line is cmd/patch-agent's",
		"internal/lifecycleaction imports " + module + "internal/agent/sub",
		"internal/metrics imports " + module + "internal/engine: only internal/agent wires",
		"internal/model depends on " + module + "internal/events (directly or through another package)",
		"internal/model imports github.com/aws/aws-sdk-go-v2/service/ec2",
		"internal/operator imports github.com/aws/aws-sdk-go-v2/service/sqs: the operator's commands write the store",
		"internal/providers imports " + module + "internal/engine: only internal/agent wires",
		"internal/providers imports " + module + "internal/engine: providers answer",
	}
	for i, w := range want {
		require.Contains(t, got[i], w)
	}

	// cmd/patch-agent is a product package too: it wires the command line, not the engine.
	cmdImports := map[string][]string{module + "cmd/patch-agent": {module + "internal/cli", module + "internal/lifecycleaction"}}
	got = importViolations(cmdImports, nil, importRules)
	require.Len(t, got, 1, "%v", got)
	require.Contains(t, got[0], "cmd/patch-agent imports "+module+"internal/lifecycleaction: only internal/agent wires")
}
