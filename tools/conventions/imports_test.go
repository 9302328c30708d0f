package conventions

import (
	"bufio"
	"bytes"
	"os/exec"
	"regexp"
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
	// Why is said when the rule is broken.
	Why string
}

var importRules = []importRule{
	{Package: "internal/model",
		Forbidden:   []string{"internal/providers", "internal/engine", "internal/lifecycleaction", "internal/agent", "internal/awsapi"},
		ForbiddenRE: awsServiceClient,
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
}

// testWorld are the packages of the simulated account and the test harnesses: the production binary
// (cmd/patch-agent built with -tags nodemo) links none of them.
var testWorld = []string{"internal/sim", "internal/testworld", "internal/demo", "internal/testenv", "internal/org/orgsim", "internal/audit/fleet"}

// importViolations returns one line per import a rule forbids, for packages given as import path -> imports.
func importViolations(imports map[string][]string, rules []importRule) []string {
	var out []string
	for _, r := range rules {
		for _, imp := range imports[module+r.Package] {
			bad := r.ForbiddenRE != nil && r.ForbiddenRE.MatchString(imp)
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
	return out
}

// goList runs `go list` with args in the module root and returns import path -> imports, one package per line.
func goList(t *testing.T, args ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-f", `{{.ImportPath}} {{join .Imports " "}}`}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err)
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
	for _, r := range importRules {
		require.Contains(t, pkgs, module+r.Package, "a rule names %s, which is gone", r.Package)
	}
	require.Empty(t, importViolations(pkgs, importRules))

	deps := goList(t, "-tags", "nodemo", "-deps", "./cmd/patch-agent")
	for p := range deps {
		for _, w := range testWorld {
			require.False(t, p == module+w || strings.HasPrefix(p, module+w+"/"),
				"the production build (-tags nodemo) links %s, a package of the test world", p)
		}
	}
}

// TestImportRulesRejectAForbiddenImport shows each kind of forbidden import rejected: an arrow backwards, an
// SDK client in the model, an SDK data type in the engine; and the allowed ones let through.
func TestImportRulesRejectAForbiddenImport(t *testing.T) {
	pkgs := map[string][]string{
		module + "internal/model":           {"time", "github.com/aws/aws-sdk-go-v2/service/autoscaling/types", "github.com/aws/aws-sdk-go-v2/service/ec2"},
		module + "internal/providers":       {module + "internal/model", module + "internal/engine"},
		module + "internal/engine":          {module + "internal/providers", "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"},
		module + "internal/lifecycleaction": {module + "internal/providers", module + "internal/agent/sub"},
	}
	got := importViolations(pkgs, importRules)
	require.Len(t, got, 4, "%v", got)
	require.Contains(t, got[0], "internal/model imports github.com/aws/aws-sdk-go-v2/service/ec2")
	require.Contains(t, got[1], "internal/providers imports "+module+"internal/engine")
	require.Contains(t, got[2], "internal/engine imports github.com/aws/aws-sdk-go-v2/service/autoscaling/types")
	require.Contains(t, got[3], "internal/lifecycleaction imports "+module+"internal/agent/sub")
}
