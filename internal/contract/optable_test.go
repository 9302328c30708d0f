package contract

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// operationTableSection is the heading of docs/testing.md whose table lists every AWS operation the agent
// calls.
const operationTableSection = "## AWS operations over the wire"

// interfaceSources are the Go files whose interfaces declare the AWS calls the agent makes: every interface of
// internal/awsapi, and the narrow interfaces the state store and the health checks declare for themselves.
var interfaceSources = []string{"../awsapi/*.go", "../state/dynamodb.go", "../health/health.go"}

// declaredOperations returns "service Operation" for every method of every interface in the files, the service
// being the SDK package of the method's input (*autoscaling.DescribeAutoScalingGroupsInput -> autoscaling).
func declaredOperations(t *testing.T) map[string]bool {
	t.Helper()
	ops := map[string]bool{}
	fset := token.NewFileSet()
	for _, pattern := range interfaceSources {
		files, err := filepath.Glob(pattern)
		require.NoError(t, err)
		require.NotEmpty(t, files, pattern)
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			require.NoError(t, err)
			ast.Inspect(f, func(n ast.Node) bool {
				it, ok := n.(*ast.InterfaceType)
				if !ok {
					return true
				}
				for _, m := range it.Methods.List {
					fn, ok := m.Type.(*ast.FuncType)
					if !ok || len(m.Names) == 0 || len(fn.Params.List) < 2 {
						continue
					}
					star, ok := fn.Params.List[1].Type.(*ast.StarExpr)
					if !ok {
						continue
					}
					sel, ok := star.X.(*ast.SelectorExpr)
					if !ok {
						continue
					}
					pkg := sel.X.(*ast.Ident).Name
					ops[pkg+" "+m.Names[0].Name] = true
				}
				return false
			})
		}
	}
	return ops
}

// tabledOperations returns "service Operation" for every row of the operation table in docs/testing.md, and
// the rows whose cells are not filled in.
func tabledOperations(t *testing.T) (ops map[string]bool, incomplete []string) {
	t.Helper()
	f, err := os.Open("../../docs/testing.md")
	require.NoError(t, err)
	defer f.Close()
	ops = map[string]bool{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == operationTableSection:
			in = true
			continue
		case strings.HasPrefix(line, "## "):
			in = false
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		require.GreaterOrEqual(t, len(cells), 5, "row %q needs service, operation, over the wire, emulator, simulation only", line)
		key := strings.Trim(cells[0], "`") + " " + strings.Trim(cells[1], "`")
		require.False(t, ops[key], "operation %s is listed twice", key)
		ops[key] = true
		if cells[2] == "" || cells[3] == "" || cells[4] == "" {
			incomplete = append(incomplete, key)
		}
	}
	require.NoError(t, sc.Err())
	return ops, incomplete
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The table of docs/testing.md lists exactly the operations the awsapi interfaces (and the store's and health
// checks' own interfaces) declare: a call added to an interface without a row, or a row left for a call that
// is gone, fails here.
func TestOperationTableCoversEveryAWSAPIMethod(t *testing.T) {
	declared := declaredOperations(t)
	require.Contains(t, declared, "autoscaling DescribeAutoScalingGroups", "the parser finds the interfaces")
	tabled, incomplete := tabledOperations(t)
	var missing, extra []string
	for _, op := range keys(declared) {
		if !tabled[op] {
			missing = append(missing, op)
		}
	}
	for _, op := range keys(tabled) {
		if !declared[op] {
			extra = append(extra, op)
		}
	}
	require.Empty(t, missing, "operations declared by an interface but missing from the table in docs/testing.md (%s)", operationTableSection)
	require.Empty(t, extra, "rows of the table in docs/testing.md that no interface declares")
	require.Empty(t, incomplete, "rows with an empty cell")
}
