package envoycompat

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestRuntimeLogValue checks that a log line shows the runtime layout as
// the directory read and its settings, not as a raw Go struct.
func TestRuntimeLogValue(t *testing.T) {
	for _, tc := range []struct {
		r    Runtime
		want string
	}{
		{Runtime{Root: "/srv/rl", Subdirectory: "ratelimit", AppDirectory: "config"},
			"runtime.dir=/srv/rl/ratelimit/config runtime.ignore_dot_files=false runtime.watch_root=false"},
		{Runtime{Root: "/srv/rl", Subdirectory: "ratelimit", AppDirectory: "config", IgnoreDotFiles: true, WatchRoot: true},
			"runtime.dir=/srv/rl/ratelimit runtime.app_directory=config runtime.ignore_dot_files=true runtime.watch_root=true"},
	} {
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey {
				return slog.Attr{}
			}
			return a
		}})).Info("x", "runtime", tc.r)
		if got := strings.TrimSpace(buf.String()); got != tc.want {
			t.Errorf("logged %q, want %q", got, tc.want)
		}
	}
}
