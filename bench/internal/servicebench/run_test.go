package servicebench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/bench/internal/redisproc"
)

func TestConfigValidation(t *testing.T) {
	bins := Binaries{Floodgate: "x", Theirs: "y", Floor: "z"}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no binaries", Config{Concurrency: []int{1}, Duration: time.Second}, "binaries"},
		{"no concurrency", Config{Binaries: bins, Duration: time.Second}, "concurrency"},
		{"bad concurrency", Config{Binaries: bins, Concurrency: []int{0}, Duration: time.Second}, "concurrency 0"},
		{"short", Config{Binaries: bins, Concurrency: []int{1}, Duration: time.Millisecond}, "duration"},
		{"rounds", Config{Binaries: bins, Concurrency: []int{1}, Duration: time.Second, Rounds: -1}, "rounds"},
		{"floor without its binary", Config{Binaries: Binaries{Floodgate: "x", Theirs: "y"}, Services: []Service{Floor}, Concurrency: []int{1}, Duration: time.Second}, "nullservice"},
	}
	for _, tt := range tests {
		if _, err := Run(context.Background(), tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// A service that exits at start is reported with its output, and leaves
// nothing running.
func TestServiceExitsAtStart(t *testing.T) {
	redisproc.Require(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "broken"), []byte("#!/bin/sh\necho 'cannot start: no config' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A relative path names the binary from the caller's directory, not
	// from the service's.
	t.Chdir(dir)
	var progress strings.Builder
	_, err := Run(context.Background(), Config{
		Progress: &progress,
		Binaries: Binaries{Floodgate: "./broken", Theirs: "./broken"}, Services: []Service{Theirs}, Transports: []Transport{GRPC},
		Concurrency: []int{2}, Duration: 100 * time.Millisecond,
	})
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") || !strings.Contains(err.Error(), "cannot start: no config") {
		t.Errorf("error %v, want the exit and the service's output", err)
	}
	if got := strings.Count(progress.String(), "failed, trying again"); got != 2 {
		t.Errorf("%d retries, want 2:\n%s", got, progress.String())
	}
}

// TestRunEndToEnd builds floodgate and envoyproxy/ratelimit and runs every
// cell briefly: every decision answered and allowed, each process charged
// some CPU time, Redis doing work for every service. It takes a minute or
// so the first time (the builds), and is skipped with -short.
func TestRunEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two services; skipped with -short")
	}
	redisproc.Require(t)
	dir := t.TempDir()
	bins := Binaries{Floodgate: filepath.Join(dir, "floodgate"), Theirs: filepath.Join(dir, "envoyratelimit"), Floor: filepath.Join(dir, "nullservice")}
	for _, b := range []struct{ dir, pkg, out string }{
		{"../../..", "./cmd/floodgate", bins.Floodgate},
		{"../..", "./cmd/envoyratelimit", bins.Theirs},
		{"../..", "./cmd/nullservice", bins.Floor},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	res, err := Run(context.Background(), Config{
		Binaries: bins, Concurrency: []int{4}, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Identities: 50,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every service on both transports, but serve-fasthttp and the
	// fasthttp floor on HTTP only.
	if got, want := len(res.Cells), len(Services)*len(Transports)-2; got != want {
		t.Fatalf("%d cells, want %d", got, want)
	}
	for _, c := range res.Cells {
		if c.Service.floor() {
			// No Redis: every check answered and allowed, and the
			// service process charged CPU time.
			if c.Decisions == 0 || c.Errors != 0 || c.Denied != 0 || c.KeyedCommands != 0 || c.ScriptCalls != 0 || c.CPU.Loadgen <= 0 {
				t.Errorf("%v %v: %+v", c.Service, c.Transport, c)
			}
			continue
		}
		if c.Decisions == 0 || c.Errors != 0 || c.Denied != 0 || c.RedisCommands < c.Decisions/10 || c.P99 < c.P50 {
			t.Errorf("%v %v: %+v", c.Service, c.Transport, c)
		}
		// Every decision on Redis, with its read and write of the counter;
		// the Floodgate services through a script, theirs without.
		if c.Invalid() || keyedShort(c) || (c.ScriptCalls > 0) != (c.Service != Theirs) {
			t.Errorf("%v %v: not by Redis %d, %d keyed commands and %d script calls for %d decisions",
				c.Service, c.Transport, c.NotByRedis, c.KeyedCommands, c.ScriptCalls, c.Decisions)
		}
		if c.CPU.Service < 0 || c.CPU.Redis < 0 || c.CPU.Loadgen <= 0 {
			t.Errorf("%v %v: CPU %+v", c.Service, c.Transport, c.CPU)
		}
	}
	md := Markdown(res)
	for _, want := range []string{"#### gRPC", "#### HTTP", "floodgate serve (POST /v1/check)", "envoyproxy/ratelimit (POST /json)", "floor: no-op handler, no Redis (POST /v1/check)"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
