package deploy

import (
	"strconv"
	"testing"
)

// TestKubernetesMemoryBudget: the Floodgate Deployment's memory limit
// holds the process under load (about 100 MiB resident, fallback empty)
// plus the local fallback's identities at their bound (--memory-max-keys)
// at about 450 bytes each at the peak: about 240 live (an outside walk
// measured 122 MB of live heap for 500,000), doubled by the garbage
// collector's room. 500,000 identities peaked at 307-313 MiB resident
// (gRPC load, Redis down; 277 MB against the old 256Mi limit, which the
// kernel would have enforced by killing the pod in the outage the
// fallback is for), and at 329.8 MiB VmHWM with the Deployment's
// arguments, GOMEMLIMIT=320MiB and 600,000 identities for 60 s (an
// outside walk, 2026-12-05): 5 % above this budget, 54 MiB under the
// 384Mi limit. GOMEMLIMIT must be set below the container's limit
// (the runtime collects harder near it; the kernel kills at the limit),
// and above the budget, or the collector would run without end.
func TestKubernetesMemoryBudget(t *testing.T) {
	const (
		base        = 100 << 20 // resident under load, fallback empty
		perIdentity = 450       // bytes at the peak, key and GC room included
		defaultKeys = 1_000_000 // serve's --memory-max-keys default
	)
	m := loadManifests(t, "kubernetes/floodgate")
	d, c := m.onlyDeployment(t)
	where := "Deployment " + d.Name
	flags := flagArgs(t, where, c.Args)
	keys := int64(defaultKeys)
	if v, ok := flags["memory-max-keys"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("%s: --memory-max-keys=%q", where, v)
		}
		keys = n
	}
	limit := c.Resources.Limits.Memory()
	if limit == nil || limit.IsZero() {
		t.Fatalf("%s: no memory limit", where)
	}
	need := base + keys*perIdentity
	if need > limit.Value() {
		t.Errorf("%s: memory limit %s (%d bytes) is below %d MiB under load plus %d fallback identities × %d bytes = %d bytes: set --memory-max-keys or raise the limit",
			where, limit.String(), limit.Value(), base>>20, keys, perIdentity, need)
	}
	soft := goMemLimit(t, where, c)
	switch {
	case soft == 0:
		t.Errorf("%s: no GOMEMLIMIT", where)
	case soft > limit.Value()*9/10:
		t.Errorf("%s: GOMEMLIMIT %d bytes is above 90 %% of the %s limit", where, soft, limit.String())
	case soft < need:
		t.Errorf("%s: GOMEMLIMIT %d bytes is below the %d bytes the process needs at its bound: the collector would run without end", where, soft, need)
	}
	conns := maxConns(t, where, flags["max-connections"])
	if withConns := need + conns*perIdleConn; withConns > limit.Value() {
		t.Errorf("%s: memory limit %s is below %d bytes with --max-connections=%d idle connections of %d bytes besides: lower --max-connections",
			where, limit.String(), withConns, conns, perIdleConn)
	}
	t.Logf("%s: %d MiB + %d identities × %d B = %.0f MiB; GOMEMLIMIT %.0f MiB; limit %s", where, base>>20, keys, perIdentity, float64(need)/(1<<20), float64(soft)/(1<<20), limit.String())
}

// perIdleConn is the resident memory an idle keep-alive connection
// costs: about 26 KB on net/http, 21 KB on fasthttp (an outside walk:
// 5,000 idle connections took a process from 31 to 161 MB).
const perIdleConn = 26_000

// maxConns reads a connection cap (--max-connections, FLOODGATE_MAX_CONNECTIONS):
// the default, derived from the file descriptor limit, can be hundreds of
// thousands in a container, so the manifests must set one.
func maxConns(t *testing.T, where, v string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("%s: connection cap %q: want a number of connections that fits the memory limit (the default follows the file descriptor limit, not memory)", where, v)
	}
	return n
}

// TestEnvoyCompatConnectionsFitMemory: the envoy-compat Deployment caps
// its connections (FLOODGATE_MAX_CONNECTIONS) at what its memory limit holds beside
// the process under load (about 100 MiB resident).
func TestEnvoyCompatConnectionsFitMemory(t *testing.T) {
	const base = 100 << 20
	m := loadManifests(t, "kubernetes/envoy-compat")
	d, c := m.onlyDeployment(t)
	where := "Deployment " + d.Name
	v := ""
	for _, e := range c.Env {
		if e.Name == "FLOODGATE_MAX_CONNECTIONS" {
			v = e.Value
		}
	}
	conns := maxConns(t, where, v)
	limit := c.Resources.Limits.Memory()
	if limit == nil || limit.IsZero() {
		t.Fatalf("%s: no memory limit", where)
	}
	if need := base + conns*perIdleConn; need > limit.Value() {
		t.Errorf("%s: memory limit %s is below %d bytes (%d MiB under load plus FLOODGATE_MAX_CONNECTIONS=%d idle connections of %d bytes)",
			where, limit.String(), need, base>>20, conns, perIdleConn)
	}
}
