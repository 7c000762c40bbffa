package server_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// TestUnknownPolicyNamesTheSource: the unknown-policy error says where the
// service's policies are listed, by the kind of its configuration's source
// (it used to say "its --config file" on instances configured from Redis
// too), without the file name or Redis key.
func TestUnknownPolicyNamesTheSource(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	for _, step := range []struct {
		source, want string
	}{
		{"/etc/floodgate/floodgate.yaml", "(its --config file; GET /admin/v1/config when the admin API is on)"},
		{"redis:fg:config", "(in Redis, published with floodgate config push; GET /admin/v1/config"},
		{config.DefaultName, "(the built-in example, printed by floodgate config example; GET"},
	} {
		// The same policies under another source (and version, for the
		// document to differ from the active one).
		doc := strings.Replace(layered, `version: "1"`, `version: "`+step.source+`"`, 1)
		if _, err := e.reloader.Apply([]byte(doc), step.source); err != nil {
			t.Fatal(err)
		}
		p := problemOf(t, e.post("/v1/check", `{"policy":"nope","identity":{"user":"victim"}}`))
		if p.Type != server.ProblemTypePrefix+"unknown-policy" || !strings.Contains(p.Detail, step.want) {
			t.Fatalf("source %s: %s %q, want unknown-policy containing %q", step.source, p.Type, p.Detail, step.want)
		}
		if step.source != config.DefaultName && strings.Contains(p.Detail, step.source) {
			t.Fatalf("the detail names the source %q: %q", step.source, p.Detail)
		}
	}
}
