package deploy

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// runProbe runs a Kubernetes probe's action the way the kubelet would
// against a container whose named ports listen at addrs (port name to
// host:port) and reports whether it succeeded.
func runProbe(t *testing.T, c corev1.Container, p *corev1.Probe, addrs map[string]string) bool {
	t.Helper()
	addrOf := func(port intstr.IntOrString) string {
		n := containerPort(c, port)
		for _, cp := range c.Ports {
			if int(cp.ContainerPort) == n {
				if a, ok := addrs[cp.Name]; ok {
					return a
				}
			}
		}
		t.Fatalf("probe port %s: no listener for it", port.String())
		return ""
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addrOf(p.HTTPGet.Port)+p.HTTPGet.Path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case p.GRPC != nil:
		conn, err := grpc.NewClient(addrOf(intstr.FromInt32(p.GRPC.Port)), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var service string
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	case p.TCPSocket != nil:
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addrOf(p.TCPSocket.Port))
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}
	t.Fatalf("probe %+v: no action this test knows", p)
	return false
}

// TestKubernetesEnvoyCompatLivenessWithoutRedis starts the envoy-compat
// Deployment's container with its Redis unreachable, as during an outage
// when a pod is (re)scheduled: its readiness probe fails (it cannot
// decide), but its liveness probe must pass, or the kubelet restarts the
// pod over and over for a fault no restart fixes, and it comes back late
// (CrashLoopBackOff) once Redis does. envoy-compat's /healthcheck is 500
// until Redis first answers, so liveness cannot probe it.
func TestKubernetesEnvoyCompatLivenessWithoutRedis(t *testing.T) {
	m := loadManifests(t, "kubernetes/envoy-compat")
	d, c := m.onlyDeployment(t)
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Fatal("want liveness and readiness probes")
	}
	_, root := m.materialize(t, d, c, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now: Redis is down
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	vars := compatVars(env, closed, root)
	const listening = "floodgate envoy-compat listening"
	rec := launch(t, floodgateBinary(t), c.Command[1:], vars, listening).Record(listening)
	addrs := map[string]string{"http": rec["http"], "grpc": rec["grpc"], "debug": rec["debug"]}

	// The kubelet restarts the container after failureThreshold failed
	// liveness probes in a row: probe that many times and more.
	n := int(max(c.LivenessProbe.FailureThreshold, 3)) + 2
	for i := range n {
		if !runProbe(t, c, c.LivenessProbe, addrs) {
			t.Fatalf("liveness probe %d of %d failed with Redis down: %+v", i+1, n, c.LivenessProbe.ProbeHandler)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if runProbe(t, c, c.ReadinessProbe, addrs) {
		t.Errorf("readiness probe passed with Redis down (%+v): the pod would get traffic it cannot decide", c.ReadinessProbe.ProbeHandler)
	}
	t.Logf("Redis down: liveness %s passes %d times, readiness %s fails", probeString(c.LivenessProbe), n, probeString(c.ReadinessProbe))
}

func probeString(p *corev1.Probe) string {
	switch {
	case p.HTTPGet != nil:
		return "GET " + p.HTTPGet.Path + " on " + p.HTTPGet.Port.String()
	case p.GRPC != nil:
		return "gRPC health on " + strconv.Itoa(int(p.GRPC.Port))
	case p.TCPSocket != nil:
		return "TCP " + p.TCPSocket.Port.String()
	}
	return "?"
}

// TestKubernetesEnvoyCompatNotReadyOnRefusedConfig starts the envoy-compat
// Deployment's container, with a real Redis, on a ConfigMap that is
// refused (its domain defined in two files), as when a rollout carries a
// bad change: the readiness probe must fail, or the pod would get Envoy's
// calls and answer each with an error (let through unlimited under
// failure_mode_deny: false), while the liveness probe passes. Once the
// ConfigMap is fixed, the pod turns ready: it was the configuration, not
// Redis, that held it back.
func TestKubernetesEnvoyCompatNotReadyOnRefusedConfig(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	m := loadManifests(t, "kubernetes/envoy-compat")
	d, c := m.onlyDeployment(t)
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Fatal("want liveness and readiness probes")
	}
	mounts, root := m.materialize(t, d, c, nil)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	dir, ok := hostPath(mounts, env["RUNTIME_ROOT"]+"/"+env["RUNTIME_SUBDIRECTORY"]+"/config")
	if !ok {
		t.Fatal("nothing is mounted at $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config")
	}
	good, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "again.yaml")
	if err := os.WriteFile(dup, good, 0o644); err != nil {
		t.Fatal(err)
	}
	vars := compatVars(env, srv.Addr, root)
	const listening = "floodgate envoy-compat listening"
	rec := launch(t, floodgateBinary(t), c.Command[1:], vars, listening).Record(listening)
	addrs := map[string]string{"http": rec["http"], "grpc": rec["grpc"], "debug": rec["debug"]}

	// The refusal is on the scrape once the start's load has run.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, body := get(t, rec["debug"], "/metrics"); strings.Contains(body, "\nfloodgate_envoy_config_rejected 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("floodgate_envoy_config_rejected never 1 with a domain defined twice")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Redis on loopback answers within moments: probe a few seconds, as
	// the kubelet would, and more than its failure threshold.
	for i := range 10 {
		if runProbe(t, c, c.ReadinessProbe, addrs) {
			t.Fatalf("readiness probe %d passed with the configuration refused (%s): the pod would answer Envoy's calls with errors", i+1, probeString(c.ReadinessProbe))
		}
		if !runProbe(t, c, c.LivenessProbe, addrs) {
			t.Fatalf("liveness probe %d failed with the configuration refused: the kubelet would restart a pod that a ConfigMap fix, not a restart, mends", i+1)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := os.Remove(dup); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for !runProbe(t, c, c.ReadinessProbe, addrs) {
		if time.Now().After(deadline) {
			t.Fatalf("readiness probe %s still failing 60s after the ConfigMap was fixed", probeString(c.ReadinessProbe))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// compatVars is the environment of the envoy-compat container run here:
// its env (name to value) with REDIS_URL set to redisAddr, RUNTIME_ROOT
// moved under root (where materialize wrote the mounts), and every
// listener on a free loopback port, logging JSON.
func compatVars(env map[string]string, redisAddr, root string) []string {
	var vars []string
	for k, v := range env {
		switch k {
		case "REDIS_URL":
			v = redisAddr
		case "RUNTIME_ROOT":
			v = filepath.Join(root, filepath.FromSlash(v))
		}
		vars = append(vars, k+"="+v)
	}
	return append(vars, "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "LOG_FORMAT=json")
}
