package sim

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnlyExportedMethodsTakeTheLock checks the lock discipline the package doc states: the world's mutexes are
// used only inside world's call, lock and hold (and Advance's own advanceMu), and call, lock and hold are
// called only from exported functions and methods, so that everything unexported runs with the lock held and
// never takes it.
func TestOnlyExportedMethodsTakeTheLock(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var bad []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			where := fset.Position(fd.Pos()).String() + " " + fd.Name.Name
			typeOf := declaredTypes(fd)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "mu", "advanceMu":
					x, ok := sel.X.(*ast.Ident)
					if !ok || typeOf[x.Name] == "" {
						bad = append(bad, where+": locks a mutex of an undeclared type")
						return true
					}
					if typeOf[x.Name] != "world" {
						return true // Faults and Organization guard their own state with their own lock
					}
					entry := typeOf[""] == "world" && (sel.Sel.Name == "mu" && (fd.Name.Name == "call" || fd.Name.Name == "lock" || fd.Name.Name == "hold") ||
						sel.Sel.Name == "advanceMu" && fd.Name.Name == "Advance")
					if !entry {
						bad = append(bad, where+": uses the world's "+sel.Sel.Name+" directly")
					}
				case "call", "lock", "hold":
					if !fd.Name.IsExported() {
						bad = append(bad, where+": takes the lock through "+sel.Sel.Name+" in an unexported function")
					}
				}
				return true
			})
		}
	}
	require.Empty(t, bad)
}

// declaredTypes maps the receiver and parameter names of fd to their type names (pointers dereferenced); the
// key "" is the receiver's type.
func declaredTypes(fd *ast.FuncDecl) map[string]string {
	out := map[string]string{}
	add := func(fl *ast.FieldList, recv bool) {
		if fl == nil {
			return
		}
		for _, field := range fl.List {
			typ := field.Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			id, ok := typ.(*ast.Ident)
			if !ok {
				continue
			}
			for _, n := range field.Names {
				out[n.Name] = id.Name
			}
			if recv {
				out[""] = id.Name
			}
		}
	}
	add(fd.Recv, true)
	add(fd.Type.Params, false)
	return out
}
