package deploy

import (
	"strconv"
	"testing"
)

// TestKubernetesMemoryBudget: the Floodgate Deployment's memory limit
// holds the process under load (about 100 MiB resident, see the manifest's
// comment) plus the local fallback's identities at their bound
// (--memory-max-keys; about 160 bytes each plus a key of about 30,
// docs/operations.md "The memory store's bound"). The bound's default,
// 1,000,000 identities (about 190 MB), did not fit the 256Mi limit: a pod
// would be OOM-killed during the Redis outage the fallback is for, when
// many identities arrive.
func TestKubernetesMemoryBudget(t *testing.T) {
	const (
		base        = 100 << 20 // resident under load, fallback empty
		perIdentity = 190       // bytes, key included
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
	t.Logf("%s: %d MiB + %d identities × %d B = %.0f MiB of a %s limit", where, base>>20, keys, perIdentity, float64(need)/(1<<20), limit.String())
}
