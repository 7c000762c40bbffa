package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRejectionProblemsAreComplete reads the package's source for every
// problem type it constructs (problemError{kind: "..."}, badRequest("...",
// ...), printableID(..., "...")): each is pre-initialised in
// floodgate_http_rejected_total (rejectionProblems), or is one the counter
// never sees. A problem added without adding it there fails here.
func TestRejectionProblemsAreComplete(t *testing.T) {
	notCounted := []string{
		// Decision failures: floodgate_decision_errors_total.
		"internal", "store-indeterminate", "store-not-replicated", "store-timeout",
		// Answered by the mux's fallback, not counted.
		"not-found", "method-not-allowed",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string]string{} // kind -> where
	literal := func(e ast.Expr) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil {
				found[v] = fset.Position(lit.Pos()).String()
			}
			return
		}
		// Forwarded parameters (badRequest's and printableID's kind) are
		// checked at their callers.
		if id, ok := e.(*ast.Ident); !ok || id.Name != "kind" {
			t.Errorf("%s: a problem type that is not a literal; list it by hand", fset.Position(e.Pos()))
		}
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "problemError" {
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == "kind" {
							literal(kv.Value)
						}
					}
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok {
					switch {
					case id.Name == "badRequest" && len(n.Args) > 0:
						literal(n.Args[0])
					case id.Name == "printableID" && len(n.Args) == 4:
						literal(n.Args[3])
					}
				}
			}
			return true
		})
	}
	if len(found) < 30 {
		t.Fatalf("found only %d problem types in the source: %v", len(found), found)
	}
	counted := rejectionProblems()
	for kind, where := range found {
		if !slices.Contains(counted, kind) && !slices.Contains(notCounted, kind) {
			t.Errorf("problem type %q (%s) is not pre-initialised in floodgate_http_rejected_total", kind, where)
		}
	}
	for _, kind := range counted {
		if _, ok := found[kind]; !ok {
			t.Errorf("rejectionProblems lists %q, which the package never answers", kind)
		}
	}
}
