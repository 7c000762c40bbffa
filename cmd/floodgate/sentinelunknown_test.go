package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// unknownMasterSample is serve's floodgate_sentinel_unknown_master sample.
const unknownMasterSample = `floodgate_sentinel_unknown_master{client="redis"}`

// TestServeSentinelsUnknownMasterSignals: with two of three sentinels
// told SENTINEL REMOVE, serve's /readyz, gauges and log say that a
// majority answers that they do not monitor the master, not that no
// majority answers; and decisions go on, on new connections too, to the
// primary the third sentinel names, as the warning says. A code review
// found /readyz saying "no majority of the sentinels answers: new
// connections go on to the primary they last named" with 3 of 3
// answering and the primary forgotten, the gauges the same as with the
// sentinels down, and nothing in the log.
func TestServeSentinelsUnknownMasterSignals(t *testing.T) {
	s := redistest.StartSentinel(t)
	svc := startService(t, "--prefix", "su", "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName)
	defer svc.stop(t)
	// serve listens once the sentinels answered a first question: its
	// first /readyz tells what they said (it said no majority answers
	// for a moment after the start).
	if code, body := readyz(t, svc.url); code != 200 || !strings.Contains(body, `"majority":true`) || strings.Contains(body, "warning") {
		t.Errorf("the first /readyz: %d %s, want ready with the sentinels' majority and no warning", code, body)
	}
	waitUntil(t, "the three sentinels answering, a majority", func() bool {
		return metricValue(t, svc.url, answeringSample) == 3 && metricValue(t, svc.url, majoritySample) == 1
	})
	for _, a := range s.SentinelAddrs[:2] {
		sc := redis.NewClient(&redis.Options{Addr: a})
		err := sc.Do(context.Background(), "SENTINEL", "REMOVE", s.MasterName).Err()
		sc.Close()
		if err != nil {
			t.Fatalf("SENTINEL REMOVE on %s: %v", a, err)
		}
	}
	var r struct {
		Status    string `json:"status"`
		Sentinels struct {
			Configured    int    `json:"configured"`
			Answering     int    `json:"answering"`
			Majority      bool   `json:"majority"`
			UnknownMaster bool   `json:"unknown_master"`
			Primary       string `json:"primary"`
			Warning       string `json:"warning"`
		} `json:"sentinels"`
	}
	var code int
	var body string
	waitUntil(t, "/readyz without a majority, three answering", func() bool {
		code, body = readyz(t, svc.url)
		r.Sentinels.Primary = "" // absent once forgotten
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("/readyz: %v: %s", err, body)
		}
		// A round decided by two counts the third as it comes.
		return !r.Sentinels.Majority && r.Sentinels.Answering == 3
	})
	t.Logf("/readyz: %s", body)
	want := `a majority of the sentinels answer that they do not monitor master "` + s.MasterName + `"`
	if code != 200 || r.Status != "ready" || r.Sentinels.Configured != 3 || r.Sentinels.Answering != 3 || !r.Sentinels.UnknownMaster ||
		r.Sentinels.Primary != "" || !strings.HasPrefix(r.Sentinels.Warning, want) || strings.Contains(r.Sentinels.Warning, "last named") {
		t.Errorf("/readyz with two sentinels not monitoring the master: %d %s, want 200 ready, 3 of 3 answering, unknown_master, no primary and a warning starting %q", code, body, want)
	}
	if got := metricValue(t, svc.url, unknownMasterSample); got != 1 {
		t.Errorf("%s = %v, want 1", unknownMasterSample, got)
	}
	if got := metricValue(t, svc.url, answeringSample); got != 3 {
		t.Errorf("%s = %v, want 3", answeringSample, got)
	}
	const logged = "a majority of the sentinels answer that they do not monitor the Redis master"
	if !strings.Contains(svc.Logs(), logged) {
		t.Errorf("the log does not say %q:\n%s", logged, svc.Logs())
	}
	// New connections: the primary the third sentinel names.
	if err := s.Primary.Client(t).ClientKillByFilter(context.Background(), "TYPE", "normal").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE normal: %v", err)
	}
	if code, res := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "login", Identity: map[string]string{"account": "a", "ip": "192.0.2.1"}}); code != 200 || res.Degraded {
		t.Errorf("a check on a new connection with one sentinel monitoring the master: %d %+v, want decided on the primary", code, res)
	}

	// One of the two that forgot the master stops: two answer, one that
	// it does not monitor the master, one naming the primary. No
	// majority, and no primary to go on with: /readyz must not say that
	// new connections go on to the one they last named (a review found
	// it did), and the log names the answer as such, not "redis: nil".
	s.Sentinels[0].Stop()
	waitUntil(t, "/readyz with two sentinels answering", func() bool {
		code, body = readyz(t, svc.url)
		r.Sentinels.Primary, r.Sentinels.UnknownMaster = "", false
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("/readyz: %v: %s", err, body)
		}
		return r.Sentinels.Answering == 2 && !r.Sentinels.UnknownMaster
	})
	t.Logf("/readyz: %s", body)
	const noPrimary = "no majority of the sentinels names a primary, and there is none named before to go on with"
	if r.Sentinels.Majority || r.Sentinels.Primary != "" || !strings.HasPrefix(r.Sentinels.Warning, noPrimary) {
		t.Errorf("/readyz with the primary forgotten and no majority: %s, want no majority, no primary and a warning starting %q", body, noPrimary)
	}
	var line string
	waitUntil(t, "the log line of no majority", func() bool {
		for l := range strings.Lines(svc.Logs()) {
			if strings.Contains(l, "no majority of the sentinels answered") {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, s.SentinelAddrs[1]+": does not monitor the master") || strings.Contains(line, "redis: nil") {
		t.Errorf("the log line does not say that %s does not monitor the master, or says redis: nil: %s", s.SentinelAddrs[1], line)
	}
}
