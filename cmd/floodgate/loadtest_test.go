package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/health"

	"github.com/floodgate-rl/floodgate/envoycompat"
)

// TestLoadtestEnvoyJSON drives envoy-compat's POST /json handler (in
// memory, 2 per user per hour) with loadtest --mode envoy-json: every
// request answered, 2 of each identity's allowed.
func TestLoadtestEnvoyJSON(t *testing.T) {
	svc, err := envoycompat.NewService(envoycompat.Options{Store: &envoycompat.MemoryStore{}, NearLimitRatio: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoycompat.Load([]envoycompat.File{{Name: "config.lt.yaml", Data: []byte("domain: lt\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	srv := httptest.NewServer(svc.HTTPHandler(envoycompat.NewHealth(health.NewServer(), false)))
	t.Cleanup(srv.Close)

	code, out, errOut := cli("loadtest", "--mode", "envoy-json", "--target", srv.URL, "--domain", "lt",
		"--concurrency", "3", "--timeout", "2s", "--requests", "30", "--identities", "5", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"(envoy-json)", "requests           30 ", "allowed            10\n", "denied (429)       20\n", "errors             0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestLoadtestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"loadtest", "--mode", "json"}, `--mode: loadgen: invalid options: mode "json"`},
		{[]string{"loadtest", "--target", "grpc://127.0.0.1:1", "--grpc-client", "netty"}, `--grpc-client: loadgen: invalid options: gRPC client "netty"`},
		{[]string{"loadtest", "--mode", "envoy-json", "--target", "grpc://127.0.0.1:1"}, "mode envoy-json needs an http:// or https:// target"},
		{[]string{"loadtest", "--target", "grpc://127.0.0.1:1", "--concurrency", "2", "--connections", "3"}, "connections 3 out of range 1..2"},
	} {
		code, _, errOut := cli(tc.args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestLoadtestFailsWhenNothingAnswers: a run in which every request
// failed (nothing listens on the target) exits 1 saying so; it used to
// print its report and exit 0.
func TestLoadtestFailsWhenNothingAnswers(t *testing.T) {
	code, out, errOut := cli("loadtest", "--target", "http://"+closedAddr(t), "--duration", "200ms", "--concurrency", "2", "--quiet")
	if code != 1 || !strings.Contains(errOut, "requests failed") || !strings.Contains(out, "errors") {
		t.Fatalf("exit %d, stderr %q, report %q; want 1, the report, and a line saying every request failed", code, errOut, out)
	}
}
