package config_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/memstore"
)

// envoyDoc is a descriptor configuration of domain with a per-user limit.
func envoyDoc(domain string, perMinute int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: " + strconv.Itoa(perMinute) + "}\n"
}

var mtimeSeq atomic.Int64

// writeFile replaces path's content through a rename, as editors and
// configuration management do, and gives it a modification time no other
// write in this test run has, so that a same-size edit is noticed however
// coarse the file system's clock is.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1_700_000_000+mtimeSeq.Add(1), 0)
	if err := os.Chtimes(tmp, mt, mt); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// reloadsOf returns floodgate_config_reload_total{source,result}, or -1
// when the series does not exist.
func reloadsOf(t *testing.T, reg *prometheus.Registry, source, result string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_config_reload_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["result"] == result {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return -1
}

// rlsClient serves the Envoy rate limit API over a real gRPC listener,
// deciding in memory under the reloader's configuration.
func rlsClient(t *testing.T, er *config.EnvoyReloader) rlspb.RateLimitServiceClient {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "envoy-reload"})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoyrls.NewService(lim, er.Load, envoyrls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc.Register(gs)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(ln) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// userLimit asks for one decision for user in domain and returns the
// configured requests_per_unit the answer reports, or the gRPC code when
// the call failed.
func userLimit(t *testing.T, c rlspb.RateLimitServiceClient, domain, user string) (uint32, codes.Code) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
	}})
	if err != nil {
		return 0, status.Code(err)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), codes.OK
}

// TestEnvoyReloadOverGRPC: the gRPC service answers with the limits of the
// newest valid descriptor files; a broken file, a domain defined twice or
// a missing directory is rejected, counted, and changes nothing.
func TestEnvoyReloadOverGRPC(t *testing.T) {
	dir := t.TempDir()
	edge := filepath.Join(dir, "edge.yaml")
	writeFile(t, edge, envoyDoc("edge", 3))
	reg := prometheus.NewRegistry()
	// The main configuration's reloader shares the registry and the metric.
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	h, err := config.NewHolder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.NewReloader(h, config.ReloaderOptions{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	er, err := config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	client := rlsClient(t, er)
	ctx, cancel := context.WithCancel(context.Background())
	watching := make(chan struct{})
	go func() { er.Watch(ctx, 20*time.Millisecond); close(watching) }()
	t.Cleanup(func() { cancel(); <-watching })

	if l, code := userLimit(t, client, "edge", "alice"); l != 3 || code != codes.OK {
		t.Fatalf("initial limit %d (%v), want 3", l, code)
	}
	// Edit the file: the new limit applies without a restart.
	writeFile(t, edge, envoyDoc("edge", 7))
	waitFor(t, "the edited limit", func() bool { l, _ := userLimit(t, client, "edge", "alice"); return l == 7 })

	// Every step below is one file write, so the watcher never sees a
	// state in between.
	again := filepath.Join(dir, "again.yaml")
	// A second file defining the same domain: the set is rejected.
	writeFile(t, again, envoyDoc("edge", 5))
	waitFor(t, "the duplicate domain to be rejected", func() bool { return reloadsOf(t, reg, "envoy", "invalid") == 1 })
	if l, _ := userLimit(t, client, "edge", "alice"); l != 7 {
		t.Fatalf("a rejected set of files changed the limit to %d", l)
	}
	// Fixed: a new domain next to the old one.
	writeFile(t, again, envoyDoc("internal", 50))
	waitFor(t, "the new domain", func() bool { l, _ := userLimit(t, client, "internal", "bob"); return l == 50 })
	// A broken file is rejected; the last good limits stay.
	writeFile(t, edge, envoyDoc("edge", 9)+"  - key: oops\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	waitFor(t, "the broken file to be rejected", func() bool { return reloadsOf(t, reg, "envoy", "invalid") == 2 })
	// While it is broken, a valid change to the other file is not
	// applied either: all or nothing.
	writeFile(t, again, envoyDoc("internal", 60))
	waitFor(t, "the set with a broken file to be rejected", func() bool { return reloadsOf(t, reg, "envoy", "invalid") == 3 })
	if e, _ := userLimit(t, client, "edge", "alice"); e != 7 {
		t.Fatalf("a broken file changed the edge limit to %d", e)
	}
	if i, _ := userLimit(t, client, "internal", "bob"); i != 50 {
		t.Fatalf("a set with a broken file was partly applied: internal limit %d", i)
	}
	// Fixing the broken file applies both changes.
	writeFile(t, edge, envoyDoc("edge", 11))
	waitFor(t, "the fixed files", func() bool { l, _ := userLimit(t, client, "edge", "alice"); return l == 11 })
	if l, code := userLimit(t, client, "internal", "bob"); l != 60 || code != codes.OK {
		t.Fatalf("internal after the fix: limit %d (%v)", l, code)
	}
	if got := strings.Join(er.Files(), ","); got != again+","+edge {
		t.Fatalf("files %s", got)
	}
	// The directory disappears (at once: removing its files one by one
	// would be a series of valid changes): an error, counted; the limits
	// stay.
	if err := os.Rename(dir, dir+"-gone"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir + "-gone") })
	waitFor(t, "the missing directory to count as an error", func() bool { return reloadsOf(t, reg, "envoy", "error") >= 1 })
	if l, _ := userLimit(t, client, "internal", "bob"); l != 60 {
		t.Fatalf("a missing directory changed the limits: %d", l)
	}
	if a := reloadsOf(t, reg, "envoy", "applied"); a != 3 {
		t.Fatalf("envoy applied %d, want 3", a)
	}
	if a, i := reloadsOf(t, reg, "policies", "applied"), reloadsOf(t, reg, "policies", "invalid"); a != 0 || i != 0 {
		t.Fatalf("the policies source counted envoy reloads: applied %d invalid %d", a, i)
	}
}

func TestEnvoyReloaderFilesAndErrors(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")
	writeFile(t, a, envoyDoc("a", 1))
	writeFile(t, b, envoyDoc("b", 2))
	writeFile(t, filepath.Join(dir, "notes.txt"), "not yaml")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "domain: [")
	// Repeatable paths: a file and a directory holding another.
	other := t.TempDir()
	c := filepath.Join(other, "c.yaml")
	writeFile(t, c, envoyDoc("c", 3))
	er, err := config.NewEnvoyReloader([]string{c, dir}, config.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(er.Load().Domains(), ","); got != "a,b,c" {
		t.Fatalf("domains %s", got)
	}
	if got := strings.Join(er.Files(), ","); got != c+","+a+","+b {
		t.Fatalf("files %s", got)
	}
	// Nothing changed: Reload is a no-op.
	before := er.Load()
	if cfg, err := er.Reload(); err != nil || cfg != before {
		t.Fatalf("unchanged reload: %v, same %v", err, cfg == before)
	}
	// The same bytes rewritten: noticed, but not applied again.
	writeFile(t, a, envoyDoc("a", 1))
	if cfg, err := er.Reload(); err != nil || cfg != before {
		t.Fatalf("rewritten identical file: %v, same %v", err, cfg == before)
	}
	// Errors carry the file and position.
	writeFile(t, b, "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: -1}\n")
	_, err = er.Reload()
	if !errors.Is(err, envoyrls.ErrInvalidConfig) || !strings.Contains(err.Error(), b+":4:") {
		t.Fatalf("invalid file: %v", err)
	}
	if er.Load() != before {
		t.Fatal("an invalid file replaced the configuration")
	}

	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"no paths", nil, "no Envoy descriptor configuration"},
		{"missing", []string{filepath.Join(dir, "nope.yaml")}, "no such file"},
		{"empty directory", []string{t.TempDir()}, "holds no .yaml or .yml file"},
		{"same file twice", []string{a, dir}, "is given twice"},
		{"invalid", []string{b}, "requests_per_unit"},
		{"domain twice", []string{a, writeTemp(t, envoyDoc("a", 9))}, `domain "a" is already defined`},
	} {
		if _, err := config.NewEnvoyReloader(tc.paths, config.ReloaderOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.yaml")
	writeFile(t, path, content)
	return path
}

// TestEnvoyReloaderNoticesAnotherFileWithTheSameStamp renames over a
// descriptor file another one of the same size and modification time (a
// copy that kept its time, as cp -p, rsync -t and unpacked archives
// make): its content is new, so the reload applies it.
func TestEnvoyReloaderNoticesAnotherFileWithTheSameStamp(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	fixed := time.Unix(1, 0)
	put := func(doc string) {
		t.Helper()
		tmp := filepath.Join(dir, ".a.yaml.tmp")
		writeFile(t, tmp, doc)
		if err := os.Chtimes(tmp, fixed, fixed); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, a); err != nil {
			t.Fatal(err)
		}
	}
	put(envoyDoc("a", 1))
	er, err := config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := er.Load()
	put(envoyDoc("a", 2))
	cfg, err := er.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if cfg == before {
		t.Fatal("a file of the same size and time renamed over a.yaml was not read")
	}
}

// TestEnvoyReloaderAppliesAFileCutAfterADescriptor is why envoy.md asks
// for files to be replaced, not written in place: a poll that reads a
// file cut after a complete descriptor reads a valid set, and applies it
// without the descriptors still to come.
func TestEnvoyReloaderAppliesAFileCutAfterADescriptor(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	full := envoyDoc("a", 1) + "  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	if err := os.WriteFile(a, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	er, err := config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The first half of an in-place rewrite, as a poll can read it.
	if err := os.WriteFile(a, []byte(envoyDoc("a", 2)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := er.Reload(); err != nil {
		t.Fatalf("a file cut after a descriptor: %v, want it applied", err)
	}
	if n := len(er.Load().Rules()); n != 1 {
		t.Fatalf("%d rules after the cut file, want 1", n)
	}
}
