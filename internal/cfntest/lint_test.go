package cfntest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// repoRoot is the repository root, relative to this package.
const repoRoot = "../.."

// installHint says how to get the linter.
const installHint = "cfn-lint is not installed: run npm ci at the repository root (package.json pins cfn-lint)"

// inCI reports whether $CI asks that missing tools fail tests instead of skipping them.
func inCI() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CI")))
	return v != "" && v != "false" && v != "0"
}

func TestCfnLintFindsNothing(t *testing.T) {
	t.Parallel() // a few seconds of node; the other tests need not wait
	_, npxErr := exec.LookPath("npx")
	_, binErr := os.Stat(filepath.Join(repoRoot, "node_modules", ".bin", "cfn-lint"))
	if npxErr != nil || binErr != nil {
		if inCI() {
			t.Fatalf("%s (CI is set, so this fails instead of skipping)", installHint)
		}
		t.Skip(installHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "scripts", "cfn-lint.sh"))
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/cfn-lint.sh:\n%s", out)
	if err != nil {
		t.Fatalf("scripts/cfn-lint.sh: %v (findings above)", err)
	}
}
