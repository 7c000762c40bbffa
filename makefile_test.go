package floodgate_test

import (
	"os"
	"os/exec"
	"path/filepath"
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
