package filestamp_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/filestamp"
)

// TestRewriteInPlaceKeepingSizeAndTime: a file rewritten in place with
// the same size and its old modification time put back has another stamp
// (on Linux, by its ctime).
func TestRewriteInPlaceKeepingSizeAndTime(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the status change time is read on Linux only")
	}
	path := filepath.Join(t.TempDir(), "rl.yaml")
	if err := os.WriteFile(path, []byte("limit: 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := stat(t, path)
	time.Sleep(20 * time.Millisecond) // a ctime tick apart on any file system
	if err := os.WriteFile(path, []byte("limit: 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, before.Mod, before.Mod); err != nil {
		t.Fatal(err)
	}
	after := stat(t, path)
	if after.Size != before.Size || !after.Mod.Equal(before.Mod) {
		t.Fatalf("the rewrite did not keep size and time: %+v, %+v", before, after)
	}
	if after.Equal(before) {
		t.Fatalf("a rewrite in place has the same stamp %+v", after)
	}
	if !after.Equal(stat(t, path)) {
		t.Fatal("two looks at an unchanged file differ")
	}
}

func stat(t *testing.T, path string) filestamp.Stamp {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return filestamp.Of(fi)
}
