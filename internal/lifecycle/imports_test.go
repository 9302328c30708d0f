package lifecycle

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sdkService is the prefix of every AWS SDK service package (clients, inputs, types).
const sdkService = "github.com/aws/aws-sdk-go-v2/service/"

// sdkFiles are the files of this package that may import an AWS SDK service package: the providers and the
// readers that own their calls, SDK inputs and caches (docs/architecture.md, "Packages"). The rollout engine's
// decision files (rollout*.go) are not among them: they say what to do through Groups and TemplateProvider.
var sdkFiles = []string{
	"ami.go", "amifacts.go", "amigate.go", "confirm.go", "eks_source.go", "groups.go", "hookreader.go", "hooks.go",
	"nodegroups.go",
	"hooks_complete.go", "hooks_facts.go", "launchtemplate.go", "policy.go", "recover.go", "target.go", "view.go",
	"warmpool.go",
	"hooks_takeover.go", "refreshes.go",
}

// TestDecisionFilesImportNoAWSService lists the package's files with `go list -json` and parses each one's
// imports: no decision file (rollout*.go) imports an SDK service package, and no file outside sdkFiles does,
// so a new AWS call lands in a provider (or the list and the package map change with it, in review).
func TestDecisionFilesImportNoAWSService(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go binary on PATH")
	}
	out, err := exec.Command(goBin, "list", "-json", ".").Output()
	require.NoError(t, err)
	var pkg struct {
		Dir     string
		GoFiles []string
		Imports []string
	}
	require.NoError(t, json.Unmarshal(out, &pkg))
	decisions := 0
	for _, f := range pkg.GoFiles {
		parsed, err := parser.ParseFile(token.NewFileSet(), filepath.Join(pkg.Dir, f), nil, parser.ImportsOnly)
		require.NoError(t, err)
		var sdk []string
		for _, imp := range parsed.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(path, sdkService) {
				sdk = append(sdk, path)
			}
		}
		if strings.HasPrefix(f, "rollout") {
			decisions++
			require.Empty(t, sdk, "decision file %s imports an AWS SDK service package: move the call into a provider (groups.go)", f)
			continue
		}
		if len(sdk) > 0 {
			require.Contains(t, sdkFiles, f, "%s imports %v but is not a provider listed in sdkFiles and docs/architecture.md", f, sdk)
		}
	}
	require.GreaterOrEqual(t, decisions, 8, "the rollout engine's decision files were found")
	for _, f := range sdkFiles {
		require.True(t, slices.Contains(pkg.GoFiles, f), "sdkFiles names %s, which is gone", f)
	}
}
