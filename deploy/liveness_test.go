package deploy

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	var vars []string
	for _, e := range c.Env {
		v := e.Value
		switch e.Name {
		case "REDIS_URL":
			v = closed
		case "RUNTIME_ROOT":
			v = filepath.Join(root, filepath.FromSlash(v))
		}
		vars = append(vars, e.Name+"="+v)
	}
	vars = append(vars, "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "LOG_FORMAT=json")
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
