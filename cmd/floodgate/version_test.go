package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVersionFlag checks that --version prints the stamped version (the
// container image test in deploy/ checks a build stamped with -ldflags).
func TestVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if got, want := strings.TrimSpace(out.String()), "floodgate version "+version; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}

// TestVersionCommand: "floodgate version" prints what --version prints
// (an outside walk found it an unknown command).
func TestVersionCommand(t *testing.T) {
	code, out, errOut := cli("version")
	_, flagOut, _ := cli("--version")
	if code != 0 || out != flagOut || errOut != "" {
		t.Fatalf("version: exit %d, stdout %q, stderr %q; want 0 and %q (what --version prints)", code, out, errOut, flagOut)
	}
}

// TestUnknownCommandsListTheCommands: a mistyped top-level command, like
// one of config or demo, fails naming the commands there are; an unknown
// help topic fails the same way (it printed "Unknown help topic" and the
// usage, and exited 0), at the top and under a group.
func TestUnknownCommandsListTheCommands(t *testing.T) {
	const all = "check, completion, config, demo, doctor, envoy-compat, loadtest, serve, version"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuchcommand"}, `unknown command "nosuchcommand" for "floodgate" (want one of: ` + all + `)`},
		{[]string{"serv"}, `unknown command "serv" for "floodgate" (want one of: ` + all + `): did you mean "serve"?`},
		{[]string{"help", "bogus"}, `unknown help topic "bogus" for "floodgate" (want one of: ` + all + `)`},
		{[]string{"help", "config", "bogus"}, `unknown help topic "bogus" for "floodgate config" (want one of: example, push, validate)`},
		{[]string{"help", "check", "bogus"}, `unknown help topic "bogus": "floodgate check" has no subcommands`},
	} {
		code, out, errOut := cli(tc.args...)
		if code != 1 || out != "" || strings.TrimSpace(errOut) != "floodgate: "+tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1, nothing, and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	// The topics there are still print their help.
	for _, args := range [][]string{{"help"}, {"help", "config"}, {"help", "config", "validate"}} {
		if code, out, errOut := cli(args...); code != 0 || !strings.Contains(out, "Usage:") || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q; want 0 and the help", args, code, errOut)
		}
	}
}
