package redisproc

import (
	"context"
	"os"
	"os/exec"
	"testing"
)

func TestStartStop(t *testing.T) {
	Require(t)
	ctx := context.Background()
	s, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if s.Port == sharedPort {
		t.Fatalf("started on the shared port %d", s.Port)
	}
	c := s.Client(2)
	defer c.Close()
	if err := c.Set(ctx, "redisproc:test", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ConfigGet(ctx, "save").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg["save"]; got != "" {
		t.Errorf("save = %q, want persistence off", got)
	}
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := InfoField(info, "aof_enabled"); got != "0" {
		t.Errorf("aof_enabled = %q, want 0", got)
	}
	dir := s.Dir
	s.Stop()
	if !s.Exited() {
		t.Fatal("server still running after Stop")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir %s still there after Stop (stat err %v)", dir, err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING succeeded after Stop")
	}
	s.Stop() // idempotent
}

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Options{Bin: "no-such-redis-server-binary"}); err == nil {
		t.Error("missing binary: no error")
	}
	if _, err := Start(ctx, Options{StartTimeout: -1}); err == nil {
		t.Error("negative timeout: no error")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return
	}
	// A bad option makes the server exit during start-up: the error says so.
	if _, err := Start(ctx, Options{ExtraArgs: []string{"--no-such-option", "1"}}); err == nil {
		t.Error("bad option: no error")
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\n"
	if got := InfoField(info, "process_id"); got != "42" {
		t.Errorf("process_id = %q", got)
	}
	if got := InfoField(info, "missing"); got != "" {
		t.Errorf("missing = %q", got)
	}
}
