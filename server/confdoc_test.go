package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// configurationDoc returns docs/configuration.md and its full example.
func configurationDoc(t *testing.T) (doc, example string) {
	t.Helper()
	raw, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "## A full example\n\n```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/configuration.md has no full example")
	}
	return string(raw), example
}

// block returns the text of the first fenced block of kind (sh, json)
// after marker in doc, before the next heading or, when marker starts a
// list item, the next item.
func block(t *testing.T, doc, marker, kind string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, marker)
	if !ok {
		t.Fatalf("docs/configuration.md has no %q", marker)
	}
	rest, _, _ = strings.Cut(rest, "\n#")
	if strings.HasPrefix(marker, "* ") {
		rest, _, _ = strings.Cut(rest, "\n* ")
	}
	_, rest, ok = strings.Cut(rest, "```"+kind+"\n")
	text, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("docs/configuration.md has no %s block after %q", kind, marker)
	}
	return text
}

// shellWords splits a documented command line as sh does for the forms
// the docs use: words separated by blanks, single-quoted strings, and
// backslash-newline continuations.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	line = strings.ReplaceAll(line, "\\\n", " ")
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestDocumentedQuotaAnswer: the answer docs/configuration.md prints for
// its reserve of the full example's llm-tokens quota (timezone
// Europe/Berlin) has the period the service answers, its bounds at
// Berlin's midnights with their offset. A config walk found it printed in
// UTC ("2026-12-01T00:00:00Z") where the service answers "+01:00".
func TestDocumentedQuotaAnswer(t *testing.T) {
	doc, example := configurationDoc(t)
	cmd := shellWords(t, block(t, doc, "### Quotas over HTTP\n", "sh"))
	var path, body string
	for i, w := range cmd {
		if strings.HasPrefix(w, "localhost:8080/") {
			path = strings.TrimPrefix(w, "localhost:8080")
		}
		if w == "-d" && i+1 < len(cmd) {
			body = cmd[i+1]
		}
	}
	if path == "" || body == "" {
		t.Fatalf("no request in the documented command %q", cmd)
	}
	var printed map[string]json.RawMessage
	if err := json.Unmarshal([]byte(block(t, doc, "### Quotas over HTTP\n", "json")), &printed); err != nil {
		t.Fatalf("the documented answer: %v", err)
	}

	// A moment in the printed period.
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	got := quotaAnswer(t, parse(t, example), at, path, body)
	if !bytes.Equal(got["period"], printed["period"]) {
		t.Errorf("the documented answer's period is %s; the service answers %s", printed["period"], got["period"])
	}

	// The answer holds for the full example only: serve's built-in
	// configuration counts the quota's months in UTC. The text between
	// the command and the answer says so, and gives the built-in's start
	// (a re-walk found nothing saying which configuration answered +01:00).
	builtin, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	var period struct{ Start string }
	if err := json.Unmarshal(quotaAnswer(t, builtin, at, path, body)["period"], &period); err != nil {
		t.Fatal(err)
	}
	_, between, _ := strings.Cut(doc, "### Quotas over HTTP\n")
	_, between, _ = strings.Cut(between, "```sh\n")
	_, between, _ = strings.Cut(between, "```\n")
	between, _, _ = strings.Cut(between, "```json\n")
	if !strings.Contains(between, "with the full example above") || !strings.Contains(between, "`"+period.Start+"`") {
		t.Errorf("the text before the documented answer, %q, does not say it is the full example's (with the full example above) and that the built-in configuration answers %s", between, period.Start)
	}
}

// quotaAnswer posts body to path on a server of cfg at the time at, and
// returns the answer's fields.
func quotaAnswer(t *testing.T, cfg *config.Config, at time.Time, path, body string) map[string]json.RawMessage {
	t.Helper()
	holder, err := config.NewHolder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(memStore(t), floodgate.Options{Prefix: uniquePrefix(t), Clock: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(lim, holder, server.Options{DecisionTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	e := &env{t: t, url: hs.URL, holder: holder, srv: srv, lim: lim}
	r := e.post(path, body)
	var got map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 {
		t.Fatalf("POST %s: %d %s (%v)", path, r.status, r.body, err)
	}
	return got
}

// TestDocumentedUncleanPathCommand: the command docs/configuration.md
// gives for a path not in clean form, run as written with curl, is
// answered 307 to the clean path. Without --path-as-is, curl removes the
// dot segments itself and the reader's check was counted, 200.
func TestDocumentedUncleanPathCommand(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl to run the documented command with")
	}
	doc, example := configurationDoc(t)
	cmd := shellWords(t, block(t, doc, "* A path not in clean form", "sh"))
	if len(cmd) == 0 || cmd[0] != "curl" {
		t.Fatalf("the documented command %q is not a curl command", cmd)
	}
	e := start(t, example, memStore(t), nil)
	args := []string{"-s", "-o", os.DevNull, "-w", "%{http_code} %{redirect_url}"}
	for _, w := range cmd[1:] {
		if w == "-i" {
			continue // the status is written by -w
		}
		if rest, ok := strings.CutPrefix(w, "localhost:8080"); ok {
			w = e.url + rest
		}
		args = append(args, w)
	}
	out, err := exec.Command(curl, args...).Output()
	if err != nil {
		t.Fatalf("%s %q: %v", curl, args, err)
	}
	if got, want := string(out), "307 "+e.url+"/v1/check"; got != want {
		t.Errorf("the documented command %q answered %q, want %q", cmd, got, want)
	}
}

// TestRestoreOtherPeriodSaysPeriod: a restore into a period that is
// neither the current nor the previous one is a 400 invalid-request
// saying the period is invalid, not "invalid key" (a walk found
// `floodgate: invalid key: quota restore: period "2025-01" ...`).
func TestRestoreOtherPeriodSaysPeriod(t *testing.T) {
	e := start(t, "version: 1\nquotas:\n  - {name: monthly, limit: 100, period: month, dimension: user}\n", memStore(t), nil)
	r := e.do("POST", "/admin/v1/quota/restore", testToken, server.RestoreRequest{Quota: "monthly", Identity: id("user", "u"), Used: ptr(5), Period: "2025-01"})
	if r.status != http.StatusBadRequest {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	p := problemOf(t, r)
	if !strings.HasSuffix(p.Type, "invalid-request") || strings.Contains(p.Detail, "invalid key") || !strings.Contains(p.Detail, `invalid period "2025-01"`) {
		t.Errorf("problem %+v, want invalid-request saying the period is invalid", p)
	}
}
