package regularfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/regularfile"
)

// TestOpenRefusesPipeUnread: Open of a named pipe without a writer, or of
// a link to one, returns at once an *Error saying what it is; a regular
// file, through a link too, is read.
func TestOpenRefusesPipeUnread(t *testing.T) {
	dir := t.TempDir()
	fifo, link, file := filepath.Join(dir, "ff"), filepath.Join(dir, "link"), filepath.Join(dir, "a.pem")
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		_, err := regularfile.ReadFile(p)
		var e *regularfile.Error
		if !errors.As(err, &e) || e.Path != p || !strings.HasPrefix(err.Error(), p+" is a named pipe: want a regular file") {
			t.Errorf("ReadFile(%s): %v, want an *Error saying it is a named pipe", p, err)
		}
	}
	if _, err := regularfile.Stat(dir); err == nil || err.Error() != dir+" is a directory: want a regular file (or a symbolic link to one)" {
		t.Errorf("Stat of a directory: %v", err)
	}
	if data, err := regularfile.ReadFile(file); err != nil || string(data) != "pem" {
		t.Errorf("ReadFile of a regular file: %q, %v", data, err)
	}
}
