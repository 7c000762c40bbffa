package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// doctorSentinelGrants are what docs/operations.md adds to the sentinels'
// user for floodgate doctor's sentinel check.
var doctorSentinelGrants = []string{"+sentinel|master", "+sentinel|replicas", "+sentinel|ckquorum", "+info"}

// TestServeSentinelACLUser runs serve behind Sentinel in the flag form
// (--redis-sentinel, --redis-master) as the ACL users docs/operations.md
// documents, read from the page: floodgate on the primary and the
// replica, named with --redis-username, and floodgate-sentinel on the
// sentinels. A decision is made, /readyz is 200 before and after a
// SENTINEL FAILOVER, doctor, as the page's doctor user on the primary
// and the replica, passes its sentinel check with the page's grants added
// to the sentinels' user and meets no refused read, and no server or
// sentinel logged a refusal, nor serve a NOPERM. An outside walk (sentineltls) found no way to name the
// primary's ACL user without a URL (serve authenticated as default:
// WRONGPASS), and no list of the sentinel user's permissions.
func TestServeSentinelACLUser(t *testing.T) {
	s := redistest.StartSentinel(t)
	data := []*redis.Client{s.Primary.Client(t), s.Replica.Client(t)}
	var sentinels []*redis.Client
	for _, n := range s.Sentinels {
		sentinels = append(sentinels, n.Client(t))
	}
	setACLUser(t, data, "floodgate", docACL(t, "floodgate"))
	setACLUser(t, data, "doctor", docACL(t, "doctor"))
	setACLUser(t, sentinels, "floodgate-sentinel", docACL(t, "floodgate-sentinel"))
	setACLUser(t, sentinels, "doctor-sentinel", docACL(t, "floodgate-sentinel"), doctorSentinelGrants...)

	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(aclPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, _ := config.KeysFor("fg")
	if _, err := config.Publish(context.Background(), data[0], keys, config.DefaultYAML()); err != nil {
		t.Fatal(err)
	}
	sentinelFlags := []string{"--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName,
		"--redis-password-file", pw, "--redis-sentinel-password-file", pw}
	svc := startService(t, append([]string{"--redis-username", "floodgate", "--redis-sentinel-username", "floodgate-sentinel",
		"--prefix", "fg", "--config-from-redis"}, sentinelFlags...)...)
	defer svc.stop(t)
	waitUntil(t, "readyz 200", func() bool { code, _ := readyz(t, svc.url); return code == 200 })
	if code, resp := httpPost(t, svc.url+"/v1/check", `{"policy":"api","identity":{"user":"42"}}`); code != 200 || !strings.Contains(resp, `"allowed":true`) {
		t.Errorf("check: %d %s", code, resp)
	}

	s.Failover(t)
	waitUntil(t, "readyz 200 after the failover", func() bool { code, _ := readyz(t, svc.url); return code == 200 })
	if code, resp := httpPost(t, svc.url+"/v1/check", `{"policy":"api","identity":{"user":"42"}}`); code != 200 || !strings.Contains(resp, `"remaining"`) {
		t.Errorf("check after the failover: %d %s", code, resp)
	}

	// The default user (no password) takes any password: serve's
	// connections must be the named user's.
	list, err := s.Primary.Client(t).ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list, " user=floodgate ") {
		t.Errorf("the primary has no connection of user floodgate (--redis-username):\n%s", list)
	}

	// The sentinels settle some seconds after the failover (the old
	// primary turns into a replica and they reconnect to both): until
	// then doctor rightly warns that no replica is up. It must pass once
	// they have.
	var code int
	var out string
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, out = runCLI(t, append([]string{"doctor", "--redis-username", "doctor", "--redis-sentinel-username", "doctor-sentinel", "--prefix", "fg",
			"--instance", svc.url, "--color", "never"}, sentinelFlags...)...)
		if strings.Contains(out, "[PASS] sentinel") || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(out, "[PASS] sentinel") {
		t.Errorf("doctor (exit %d) did not pass its sentinel check within 30s of the failover:\n%s", code, out)
	}
	checkDoctorPermitted(t, out)
	if refused := aclRefusals(t, append(data, sentinels...)); len(refused) > 0 {
		t.Errorf("Redis or a sentinel refused the documented users:\n%s", strings.Join(refused, "\n"))
	}
	if logs := svc.Logs(); strings.Contains(logs, "NOPERM") || strings.Contains(logs, "WRONGPASS") {
		t.Errorf("serve met NOPERM or WRONGPASS:\n%s", logs)
	}
}
