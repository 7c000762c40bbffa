package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestConfigPushACLUser runs config push as the ACL user
// docs/operations.md documents for it, read from the page, on a primary
// with a replica online (so that push sends WAIT): it publishes over no
// document and over one, and Redis refuses nothing. Then as that user
// without each of its grants in turn: push fails, names the refusal and
// gives the documented grants as the fix, and stores nothing unless
// the refusal came after the write (WAIT, PUBLISH). A walk of ACL users
// found a user without EXISTS told, on an empty prefix, that the stored
// document was invalid and declared no version, and with --force that it
// changed while publishing (a refused EXISTS read as an empty document).
func TestConfigPushACLUser(t *testing.T) {
	const user = "floodgate-push"
	rules := docACL(t, user)
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	redistest.WaitReplicaOnline(t, primary.Addr, replica)
	admin := primary.Client(t)
	admins := []*redis.Client{admin}
	ctx := context.Background()
	keys, err := config.KeysFor("fg")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	doc := func(version string) string {
		return strings.Replace(string(config.DefaultYAML()), `version: "1"`, `version: "`+version+`"`, 1)
	}
	v2 := filepath.Join(dir, "v2.yaml")
	for f, v := range map[string]string{pw: aclPassword + "\n", v2: doc("2")} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// stored returns the version stored under keys.Config, "" for none.
	stored := func(t *testing.T) string {
		t.Helper()
		c, err := config.LoadRedis(ctx, admin, keys)
		if err != nil {
			return ""
		}
		return c.Version()
	}
	// prepare stores version (none for ""), and flushes the scripts so
	// that push sends EVAL after EVALSHA's NOSCRIPT.
	prepare := func(t *testing.T, version string) {
		t.Helper()
		if err := admin.Del(ctx, keys.Config).Err(); err != nil {
			t.Fatal(err)
		}
		if version != "" {
			if _, err := config.PublishWith(ctx, admin, keys, []byte(doc(version)), config.PublishOptions{Replicas: config.ReplicasOnline}); err != nil {
				t.Fatal(err)
			}
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	push := func(t *testing.T, extra ...string) (int, string) {
		t.Helper()
		args := append([]string{"config", "push", "--redis", "redis://" + user + "@" + primary.Addr, "--redis-password-file", pw, "--prefix", "fg"}, extra...)
		return runCLI(t, append(args, v2)...)
	}

	for _, before := range []string{"", "1"} {
		t.Run("documented over version "+before, func(t *testing.T) {
			prepare(t, before)
			setACLUser(t, admins, user, rules)
			code, out := push(t)
			if code != 0 || !strings.Contains(out, `published version "2"`) {
				t.Errorf("push as the documented user: exit %d\n%s", code, out)
			}
			if got := stored(t); got != "2" {
				t.Errorf("stored version %q, want 2", got)
			}
			if refused := aclRefusals(t, admins); len(refused) > 0 {
				t.Errorf("Redis refused the documented user:\n%s", strings.Join(refused, "\n"))
			}
		})
	}

	fix := "grant the ACL user what config push sends (docs/operations.md, Redis ACL users): ACL SETUSER NAME ~fg:config &fg:config:changed +strlen "
	for _, step := range []struct {
		drop   string   // the grant taken from the documented user
		before string   // the version stored before the push, "" for none
		force  bool     // push with --force
		says   []string // in push's output
		after  string   // the version stored after it
	}{
		{drop: "+exists", says: []string{"EXISTS refused: NOPERM", "'exists'"}},
		{drop: "+exists", force: true, says: []string{"EXISTS refused: NOPERM", "'exists'"}},
		{drop: "+strlen", before: "1", says: []string{"STRLEN refused: NOPERM", "'strlen'"}, after: "1"},
		{drop: "+getrange", before: "1", says: []string{"GETRANGE refused: NOPERM", "'getrange'"}, after: "1"},
		{drop: "~fg:config", before: "1", says: []string{"STRLEN refused: NOPERM", "keys"}, after: "1"},
		{drop: "+info", before: "1", says: []string{"INFO replication", "INFO refused: NOPERM", "nothing was written"}, after: "1"},
		{drop: "+evalsha", before: "1", says: []string{"compare-and-swap script", "NOPERM", "'evalsha'"}, after: "1"},
		{drop: "+eval", before: "1", says: []string{"compare-and-swap script", "NOPERM", "'eval'"}, after: "1"},
		{drop: "+type", before: "1", says: []string{"compare-and-swap script", "can't run this command"}, after: "1"},
		{drop: "+get", before: "1", says: []string{"compare-and-swap script", "can't run this command"}, after: "1"},
		{drop: "+set", before: "1", says: []string{"compare-and-swap script", "can't run this command"}, after: "1"},
		{drop: "+wait", before: "1", says: []string{"not confirmed durable", "WAIT 1", "NOPERM", "'wait'"}, after: "2"},
		{drop: "+publish", before: "1", says: []string{"stored, but announcing", "PUBLISH refused: NOPERM", "'publish'"}, after: "2"},
		{drop: "&fg:config:changed", before: "1", says: []string{"stored, but announcing", "PUBLISH refused: NOPERM", "channel"}, after: "2"},
	} {
		name := "without " + step.drop + " over version " + step.before
		if step.force {
			name += " forced"
		}
		t.Run(name, func(t *testing.T) {
			prepare(t, step.before)
			setACLUser(t, admins, user, slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return r == step.drop }))
			var extra []string
			if step.force {
				extra = append(extra, "--force")
			}
			code, out := push(t, extra...)
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s", code, out)
			}
			for _, w := range append(step.says, fix) {
				if !strings.Contains(out, w) {
					t.Errorf("push's output does not say %q:\n%s", w, out)
				}
			}
			for _, wrong := range []string{"not a valid configuration", "version conflict", "published version"} {
				if strings.Contains(out, wrong) {
					t.Errorf("push's output says %q:\n%s", wrong, out)
				}
			}
			if got := stored(t); got != step.after {
				t.Errorf("stored version %q, want %q", got, step.after)
			}
		})
	}
}
