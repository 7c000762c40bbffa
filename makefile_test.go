package floodgate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeVetFailsOnUnformattedFiles: make vet fails when gofmt -l lists
// a file, and passes on formatted ones. It ran "gofmt -l . && go vet",
// which never failed for formatting: gofmt -l exits 0 whatever it lists.
// go vet is replaced by true here (GO=true): only the gofmt step is
// tested.
func TestMakeVetFailsOnUnformattedFiles(t *testing.T) {
	for _, tool := range []string{"make", "gofmt"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	makefile, err := filepath.Abs("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src      string
		wantFail bool
	}{
		{"package p\n\nfunc F() {}\n", false},
		{"package p\nfunc F( ) {  }\n", true},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(tc.src), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("make", "--no-print-directory", "-C", dir, "-f", makefile, "vet", "GO=true").CombinedOutput()
		if failed := err != nil; failed != tc.wantFail || tc.wantFail && !strings.Contains(string(out), "p.go") {
			t.Errorf("make vet with %q: %v\n%s\nwant failed=%v, naming p.go when it fails", tc.src, err, out, tc.wantFail)
		}
	}
}

// TestMakeTestRunsRaceSkippedTests: every test that skips itself under
// the race detector (its body reads raceEnabled) is matched by the -run
// pattern of make test's run without it, so that make test runs every
// test once. Seven such tests (allocation counts, memory per entry, a
// batching leader) matched no pattern, so no command ran them.
func TestMakeTestRunsRaceSkippedTests(t *testing.T) {
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\t\$\(GO\) test -count=1 -run '([^']+)' \./\.\.\.$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("no \"$(GO) test -count=1 -run '...' ./...\" line in the Makefile's test target")
	}
	run := regexp.MustCompile(string(m[1]))
	fset := token.NewFileSet()
	found := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "bench" || path == "deploy" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			reads := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && id.Name == "raceEnabled" {
					reads = true
				}
				return !reads
			})
			if !reads {
				continue
			}
			found++
			if !run.MatchString(fn.Name.Name) {
				t.Errorf("%s: %s reads raceEnabled but make test's run without the race detector (-run '%s') does not match it: no command runs it", fset.Position(fn.Pos()), fn.Name.Name, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 7 {
		t.Fatalf("found only %d tests reading raceEnabled", found)
	}
}
