package deploy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// manifests holds the objects of one directory of manifests, by kind.
type manifests struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  []*corev1.ConfigMap
	pdbs        []*policyv1.PodDisruptionBudget
	netpols     []*networkingv1.NetworkPolicy
}

// documentSep splits a YAML stream into documents.
var documentSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadManifests decodes every document of every .yaml file in dir
// strictly into its Kubernetes API type: an unknown or duplicated field,
// a kind the kit does not ship or a wrong apiVersion fails t.
func loadManifests(t *testing.T, dir string) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	m := &manifests{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range documentSep.Split(string(raw), -1) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			if tm.Kind == "" && strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			where := fmt.Sprintf("%s document %d (%s %s)", f, i+1, tm.APIVersion, tm.Kind)
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				m.deployments, obj = append(m.deployments, d), d
			case "v1 Service":
				s := &corev1.Service{}
				m.services, obj = append(m.services, s), s
			case "v1 ConfigMap":
				c := &corev1.ConfigMap{}
				m.configMaps, obj = append(m.configMaps, c), c
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				m.pdbs, obj = append(m.pdbs, p), p
			case "networking.k8s.io/v1 NetworkPolicy":
				p := &networkingv1.NetworkPolicy{}
				m.netpols, obj = append(m.netpols, p), p
			default:
				t.Fatalf("%s: not a kind the kit ships", where)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		}
	}
	m.checkWiring(t, dir)
	return m
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// checkWiring checks what the API server would not: selectors select the
// pod templates, Services, NetworkPolicies and probes name ports that
// exist, every container has resource requests and a memory limit, every
// ConfigMap volume names a ConfigMap of the directory, and every pod
// meets Pod Security "restricted" and goes without a service account
// token (checkPodSecurity).
func (m *manifests) checkWiring(t *testing.T, dir string) {
	t.Helper()
	for _, d := range m.deployments {
		checkPodSecurity(t, dir, d)
		tmpl := labels.Set(d.Spec.Template.Labels)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(tmpl) {
			t.Errorf("%s: Deployment %s's selector does not select its pods (%v)", dir, d.Name, err)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil && m.configMap(v.ConfigMap.Name) == nil {
				t.Errorf("%s: Deployment %s mounts ConfigMap %s, which is not in the directory", dir, d.Name, v.ConfigMap.Name)
			}
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: container %s needs CPU and memory requests and a memory limit: %+v", dir, c.Name, c.Resources)
			}
			for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
				var port intstr.IntOrString
				switch {
				case p == nil:
					t.Errorf("%s: container %s needs readiness and liveness probes", dir, c.Name)
					continue
				case p.HTTPGet != nil:
					port = p.HTTPGet.Port
				case p.TCPSocket != nil:
					port = p.TCPSocket.Port
				case p.GRPC != nil:
					port = intstr.FromInt32(p.GRPC.Port)
				}
				if containerPort(c, port) == 0 {
					t.Errorf("%s: container %s probes port %s, which it does not declare", dir, c.Name, port.String())
				}
			}
		}
	}
	for _, s := range m.services {
		d := m.selected(labels.SelectorFromSet(s.Spec.Selector))
		if d == nil {
			t.Errorf("%s: Service %s selects no Deployment's pods", dir, s.Name)
			continue
		}
		for _, p := range s.Spec.Ports {
			if containerPort(d.Spec.Template.Spec.Containers[0], p.TargetPort) == 0 {
				t.Errorf("%s: Service %s port %s targets %s, which Deployment %s does not declare", dir, s.Name, p.Name, p.TargetPort.String(), d.Name)
			}
		}
	}
	for _, p := range m.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || m.selected(sel) == nil {
			t.Errorf("%s: PodDisruptionBudget %s selects no Deployment's pods (%v)", dir, p.Name, err)
		}
	}
	for _, np := range m.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		d := m.selected(sel)
		if err != nil || d == nil {
			t.Errorf("%s: NetworkPolicy %s selects no Deployment's pods (%v)", dir, np.Name, err)
			continue
		}
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port != nil && containerPort(d.Spec.Template.Spec.Containers[0], *p.Port) == 0 {
					t.Errorf("%s: NetworkPolicy %s admits port %s, which Deployment %s does not declare", dir, np.Name, p.Port.String(), d.Name)
				}
			}
		}
	}
}

// checkPodSecurity checks that d's pods would be admitted to a namespace
// enforcing Pod Security "restricted" (its checks the kit's manifests could
// fail: no host namespaces, no privileged container, only volume types it
// allows, runAsNonRoot and no user 0, seccomp RuntimeDefault or Localhost,
// allowPrivilegeEscalation false, every capability dropped and none added
// but NET_BIND_SERVICE), and that they get no service account token
// (automountServiceAccountToken: false): no container of the kit calls
// the Kubernetes API, and a token mounted for nothing is a credential for
// whoever takes the container over.
func checkPodSecurity(t *testing.T, dir string, d *appsv1.Deployment) {
	t.Helper()
	where := fmt.Sprintf("%s: Deployment %s", dir, d.Name)
	spec := d.Spec.Template.Spec
	if a := spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("%s: automountServiceAccountToken %v, want false (no container calls the Kubernetes API)", where, a)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s: uses the host's namespaces", where)
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil && v.Secret == nil && v.EmptyDir == nil && v.Projected == nil && v.DownwardAPI == nil && v.PersistentVolumeClaim == nil {
			t.Errorf("%s: volume %s is of a type Pod Security restricted refuses", where, v.Name)
		}
	}
	pod := spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		cw := where + " container " + c.Name
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = pod.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			t.Errorf("%s: runAsNonRoot is not true", cw)
		}
		for _, u := range []*int64{pod.RunAsUser, sc.RunAsUser} {
			if u != nil && *u == 0 {
				t.Errorf("%s: runAsUser 0", cw)
			}
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
			t.Errorf("%s: seccompProfile %v, want RuntimeDefault", cw, seccomp)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", cw)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", cw)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: capabilities do not drop ALL", cw)
		} else if add := slices.DeleteFunc(slices.Clone(sc.Capabilities.Add), func(c corev1.Capability) bool { return c == "NET_BIND_SERVICE" }); len(add) > 0 {
			t.Errorf("%s: adds capabilities %v", cw, add)
		}
	}
}

// clientLabel is the label, on a caller's pods (and, for callers in other
// namespaces, on their namespace), that the kit's NetworkPolicies admit
// to the decision APIs.
const clientLabel = "floodgate.io/client"

// checkNetworkPolicy checks the directory's one NetworkPolicy against d,
// whose container is c: it selects d's pods and restricts their ingress;
// every rule names its sources (pods chosen by label) and its ports; the
// API ports (apiPorts, container port names) are admitted to the pods
// labelled clientLabel=true (in the policy's namespace, or in namespaces
// labelled so too), and any other source only to the scrape port of the
// prometheus.io/port annotation, which some source (Prometheus) is
// admitted to.
func checkNetworkPolicy(t *testing.T, where string, m *manifests, d *appsv1.Deployment, c corev1.Container, apiPorts ...string) {
	t.Helper()
	if len(m.netpols) != 1 {
		t.Fatalf("%s: want one NetworkPolicy (the APIs authenticate no caller), have %d", where, len(m.netpols))
	}
	np := m.netpols[0]
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s: NetworkPolicy %s does not select the Deployment's pods (%v)", where, np.Name, err)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("%s: NetworkPolicy %s policyTypes %v: without Ingress it restricts nothing", where, np.Name, np.Spec.PolicyTypes)
	}
	scrape, _ := strconv.Atoi(d.Spec.Template.Annotations["prometheus.io/port"])
	fromClients := map[int]bool{}
	scraped := false
	for i, r := range np.Spec.Ingress {
		rule := fmt.Sprintf("%s: NetworkPolicy %s ingress rule %d", where, np.Name, i+1)
		if len(r.From) == 0 {
			t.Errorf("%s admits every source", rule)
		}
		if len(r.Ports) == 0 {
			t.Errorf("%s admits every port", rule)
		}
		var ports []int
		for _, p := range r.Ports {
			if p.Port == nil || p.EndPort != nil {
				t.Errorf("%s admits a range of ports or every port: %+v", rule, p)
				continue
			}
			ports = append(ports, containerPort(c, *p.Port))
		}
		for _, peer := range r.From {
			if peer.IPBlock != nil || peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) == 0 {
				t.Errorf("%s: source %+v is not pods chosen by label", rule, peer)
				continue
			}
			client := peer.PodSelector.MatchLabels[clientLabel] == "true"
			if client && peer.NamespaceSelector != nil && peer.NamespaceSelector.MatchLabels[clientLabel] != "true" {
				t.Errorf("%s: callers in namespaces %v, which did not opt in with %s=true", rule, peer.NamespaceSelector, clientLabel)
			}
			for _, n := range ports {
				switch {
				case client:
					fromClients[n] = true
				case n != scrape:
					t.Errorf("%s admits port %d to pods %v, which are not labelled %s=true, and it is not the scrape port %d", rule, n, peer.PodSelector.MatchLabels, clientLabel, scrape)
				default:
					scraped = true
				}
			}
		}
	}
	for _, name := range apiPorts {
		if n := containerPort(c, intstr.FromString(name)); !fromClients[n] {
			t.Errorf("%s: NetworkPolicy %s does not admit port %s (%d) to the pods labelled %s=true", where, np.Name, name, n, clientLabel)
		}
	}
	if !scraped {
		t.Errorf("%s: NetworkPolicy %s admits no scraper to the prometheus.io/port %d", where, np.Name, scrape)
	}
}

func (m *manifests) configMap(name string) *corev1.ConfigMap {
	for _, c := range m.configMaps {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (m *manifests) selected(sel labels.Selector) *appsv1.Deployment {
	for _, d := range m.deployments {
		if !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			return d
		}
	}
	return nil
}

// containerPort returns the container port that p names (by name or
// number), or 0 when the container does not declare it.
func containerPort(c corev1.Container, p intstr.IntOrString) int {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

// onlyDeployment returns the directory's one Deployment and its one
// container.
func (m *manifests) onlyDeployment(t *testing.T) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	if len(m.deployments) != 1 || len(m.deployments[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Deployment with one container, have %d Deployments", len(m.deployments))
	}
	d := m.deployments[0]
	return d, d.Spec.Template.Spec.Containers[0]
}

// materialize writes the ConfigMap and Secret volumes of d's container
// below a temporary directory, root, at root+mountPath as the kubelet
// would mount them, and returns the mounts and root. secrets holds the
// test's Secrets, by name then key; a Secret volume naming another fails t.
func (m *manifests) materialize(t *testing.T, d *appsv1.Deployment, c corev1.Container, secrets map[string]map[string]string) (mounts []mount, root string) {
	t.Helper()
	root = t.TempDir()
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || (v.ConfigMap == nil && v.Secret == nil) {
				continue
			}
			dir := filepath.Join(root, filepath.FromSlash(vm.MountPath))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			var files map[string]string
			mode := os.FileMode(0o644)
			if v.ConfigMap != nil {
				files = m.configMap(v.ConfigMap.Name).Data
			} else {
				data, ok := secrets[v.Secret.SecretName]
				if !ok {
					t.Fatalf("Deployment %s mounts Secret %s, which the test does not make", d.Name, v.Secret.SecretName)
				}
				if v.Secret.DefaultMode != nil {
					mode = os.FileMode(*v.Secret.DefaultMode)
				}
				files = data
				if len(v.Secret.Items) > 0 {
					files = map[string]string{}
					for _, it := range v.Secret.Items {
						val, ok := data[it.Key]
						if !ok {
							t.Fatalf("Deployment %s mounts key %s of Secret %s, which the test's Secret lacks", d.Name, it.Key, v.Secret.SecretName)
						}
						files[it.Path] = val
					}
				}
			}
			for k, data := range files {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(data), mode); err != nil {
					t.Fatal(err)
				}
			}
			mounts = append(mounts, mount{target: vm.MountPath, source: dir})
		}
	}
	return mounts, root
}

// expand replaces $(NAME) in s with env's values, as the kubelet expands
// a container's command and args; unknown names fail t.
func expand(t *testing.T, s string, env map[string]string) string {
	t.Helper()
	return regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(ref string) string {
		v, ok := env[ref[2:len(ref)-1]]
		if !ok {
			t.Fatalf("%s is not an environment variable of the container", ref)
		}
		return v
	})
}

// TestKubernetesFloodgate decodes the Floodgate manifests strictly, checks
// that they agree with each other and with the binary (ports, probes,
// drain, instances, Secret, ConfigMap contents), and runs the Deployment's
// own arguments here, with its ConfigMap written where it is mounted and
// the Secret's Redis URL pointing at a real Redis, probing the endpoints
// its probes name.
func TestKubernetesFloodgate(t *testing.T) {
	m := loadManifests(t, "kubernetes/floodgate")
	d, c := m.onlyDeployment(t)
	where := "Deployment " + d.Name
	if len(c.Command) != 0 {
		t.Errorf("%s overrides the image's entrypoint: %q", where, c.Command)
	}
	flags := flagArgs(t, where, c.Args)

	// Ports: the flags, the container, the Service and Envoy's cluster.
	if got := containerPort(c, intstr.FromString("http")); got != port(t, where, flags["addr"]) || got != httpPort {
		t.Errorf("%s: port http %d, --addr %s, want both %d", where, got, flags["addr"], httpPort)
	}
	if got := containerPort(c, intstr.FromString("grpc")); got != port(t, where, flags["grpc-addr"]) || got != grpcPort {
		t.Errorf("%s: port grpc %d, --grpc-addr %s, want both %d", where, got, flags["grpc-addr"], grpcPort)
	}
	if len(m.services) != 1 {
		t.Fatalf("want one Service, have %d", len(m.services))
	}
	for _, p := range m.services[0].Spec.Ports {
		if int(p.Port) != containerPort(c, p.TargetPort) {
			t.Errorf("Service port %s: %d, but it targets %d; keep them equal so Envoy's cluster port is Floodgate's", p.Name, p.Port, containerPort(c, p.TargetPort))
		}
	}

	// Termination: serve turns readiness off, serves on for
	// --shutdown-delay, drains HTTP for up to --drain-timeout, then stops
	// gRPC gracefully for up to --drain-timeout again (cmd/floodgate
	// serve.go, grpc.go).
	delay, drain := durationFlag(t, flags, "shutdown-delay", 0), durationFlag(t, flags, "drain-timeout", 10*time.Second)
	if delay == 0 {
		t.Errorf("%s: no --shutdown-delay; pods would stop accepting before their endpoints are removed", where)
	}
	grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if need := delay + 2*drain; grace < need {
		t.Errorf("%s: terminationGracePeriodSeconds %v < shutdown delay + 2 × drain timeout = %v", where, grace, need)
	}
	if got, err := strconv.Atoi(flags["instances"]); err != nil || int32(got) != *d.Spec.Replicas {
		t.Errorf("%s: --instances %q, want replicas %d (the least instance count the local fallback divides limits by)", where, flags["instances"], *d.Spec.Replicas)
	}
	if len(m.pdbs) != 1 {
		t.Errorf("want one PodDisruptionBudget, have %d", len(m.pdbs))
	}

	// Probes on the binary's endpoints.
	if c.ReadinessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet == nil {
		t.Fatalf("%s: the probes must be HTTP GETs", where)
	}
	checkHealthListener(t, where, m, c, flags)
	// Readiness stays on while the local fallback decides (degraded=ok):
	// a Redis outage must not take every pod out of the Service.
	if c.ReadinessProbe.HTTPGet.Path != "/readyz?degraded=ok" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("%s: readiness on %s and liveness on %s, want /readyz?degraded=ok and /healthz", where, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(httpPort) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: Prometheus annotations %v, want scrape of :%d/metrics", where, ann, httpPort)
	}

	// The ConfigMap holds the kit's example files, unchanged.
	cm := m.configMap("floodgate-config")
	if cm == nil {
		t.Fatal("no ConfigMap floodgate-config")
	}
	for key, file := range map[string]string{"floodgate.yaml": "config/floodgate.yaml", "ratelimit.yaml": descriptorsFile} {
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[key] != string(want) {
			t.Errorf("ConfigMap %s key %s differs from %s", cm.Name, key, file)
		}
	}

	// The Redis URL comes from a Secret, and so does the admin token
	// (below); docs/deploy.md tells to create both before applying.
	env := map[string]string{}
	var secret *corev1.SecretKeySelector
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secret = e.ValueFrom.SecretKeyRef
			env[e.Name] = "<secret>"
		} else if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	if secret == nil || !strings.Contains(flags["redis"], "$(") {
		t.Fatalf("%s: --redis %q does not come from a Secret", where, flags["redis"])
	}
	docs, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	tokenSecret, tokenKey := checkAdminManifest(t, where, m, d, c, flags)
	// A local cluster (kind) is loaded with an image of the manifest's
	// name: build-image.sh must be given it in full, as podman would name
	// a short one localhost/NAME and make:image tags floodgate:$VERSION.
	full := c.Image
	if !strings.Contains(full, "/") {
		full = "docker.io/library/" + full // a short name's registry
	}
	for _, cmd := range []string{"deploy/build-image.sh " + full, "kind load docker-image " + c.Image, "kind load image-archive"} {
		if !bytes.Contains(docs, []byte(cmd)) {
			t.Errorf("docs/deploy.md does not say %q: a local cluster would not find the manifest's image %s", cmd, c.Image)
		}
	}
	apply := bytes.Index(docs, []byte("kubectl apply -f deploy/kubernetes/floodgate/"))
	for _, sk := range [][2]string{{secret.Name, secret.Key}, {tokenSecret, tokenKey}} {
		create := fmt.Sprintf("kubectl create secret generic %s --from-literal=%s=", sk[0], sk[1])
		if i := bytes.Index(docs, []byte(create)); i < 0 || apply < 0 || i > apply {
			t.Errorf("docs/deploy.md does not say %q before kubectl apply -f deploy/kubernetes/floodgate/", create)
		}
	}

	// Who reaches the pods: the NetworkPolicy, and docs/deploy.md's way
	// of admitting a caller.
	checkNetworkPolicy(t, where, m, d, c, "http", "grpc")
	if label := clientLabel + `: "true"`; !bytes.Contains(docs, []byte(label)) {
		t.Errorf("docs/deploy.md does not tell to label callers' pods %s", label)
	}

	// The Deployment's arguments, run here.
	redistest.Require(t)
	srv := redistest.Start(t)
	for k := range env {
		if env[k] == "<secret>" {
			env[k] = "redis://" + srv.Addr + "/0"
		}
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = expand(t, a, env)
	}
	token := adminToken(t)
	mounts, _ := m.materialize(t, d, c, map[string]map[string]string{tokenSecret: {tokenKey: token}})
	s := runAsContainer(t, where, args, mounts, "")
	// The probes as the kubelet runs them, on the listeners their ports
	// name: readiness and liveness on --health-addr.
	addrs := map[string]string{"http": s.httpAddr, "grpc": s.grpcAddr, "health": s.healthAddr}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if !runProbe(t, c, p, addrs) {
			t.Errorf("%s: probe %s failed", where, probeString(p))
		}
	}
	if code, body := get(t, s.httpAddr, ann["prometheus.io/path"]); code != 200 || !strings.Contains(body, "rate_limit_") {
		t.Errorf("%s: GET %s: %d, no rate_limit_ metrics", where, ann["prometheus.io/path"], code)
	}
	checkServing(t, where, s)
	checkAdmin(t, where, s, token)

	// Redis down: plain /readyz turns 503, the readiness probe stays 200
	// (degraded) because the local fallback decides.
	srv.Kill()
	deadline := time.Now().Add(30 * time.Second)
	readiness := addrs[c.ReadinessProbe.HTTPGet.Port.String()]
	for {
		code, body := get(t, s.httpAddr, "/readyz")
		pcode, pbody := get(t, readiness, c.ReadinessProbe.HTTPGet.Path)
		if code == 503 && pcode == 200 && strings.Contains(pbody, `"degraded"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Redis down: GET /readyz %d %s; probe GET %s %d %s; want 503 and 200 degraded", where, code, body, c.ReadinessProbe.HTTPGet.Path, pcode, pbody)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// And the liveness probe passes: a restart would not bring Redis back.
	for i := range int(max(c.LivenessProbe.FailureThreshold, 3)) + 1 {
		if !runProbe(t, c, c.LivenessProbe, addrs) {
			t.Fatalf("%s: Redis down: liveness probe %d failed (%s)", where, i+1, probeString(c.LivenessProbe))
		}
	}
}

// checkHealthListener checks where the Deployment's probes go: to
// --health-addr (serve's listener of /healthz and /readyz only, outside
// --max-connections), on a container port of its own named in no Service
// port and no NetworkPolicy rule. On --addr, which --max-connections
// caps, a flood of slow connections held /healthz 8.6 s past the probes'
// 2 s timeout (an outside walk, 2026-12-05): the kubelet would restart
// the pod under attack.
func checkHealthListener(t *testing.T, where string, m *manifests, c corev1.Container, flags map[string]string) {
	t.Helper()
	addr := flags["health-addr"]
	if addr == "" {
		t.Fatalf("%s: no --health-addr: the probes would share --addr, and its connection limit, with every client", where)
	}
	health := port(t, where, addr)
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if got := containerPort(c, p.HTTPGet.Port); got != health {
			t.Errorf("%s: probe %s on port %d, want --health-addr's %d", where, probeString(p), got, health)
		}
	}
	if health == port(t, where, flags["addr"]) || health == port(t, where, flags["grpc-addr"]) {
		t.Errorf("%s: --health-addr %s shares a port with --addr or --grpc-addr", where, addr)
	}
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			if int(p.Port) == health || containerPort(c, p.TargetPort) == health {
				t.Errorf("%s: Service %s port %s exposes the health port %d (its /readyz names a failing Redis node)", where, s.Name, p.Name, health)
			}
		}
	}
	for _, np := range m.netpols {
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port != nil && containerPort(c, *p.Port) == health {
					t.Errorf("%s: NetworkPolicy %s admits pods to the health port %d; the kubelet probes from the node", where, np.Name, health)
				}
			}
		}
	}
}

// checkAdminManifest checks how the Deployment serves the admin endpoints
// (the alert runbooks read /admin/v1/top-denied): on the pod's loopback
// (--admin-addr), a port no Service, NetworkPolicy or container port
// names, with the token in a file (--admin-token-file) of a required
// Secret volume readable by its owner only. It returns the Secret's name
// and the key that holds the token.
func checkAdminManifest(t *testing.T, where string, m *manifests, d *appsv1.Deployment, c corev1.Container, flags map[string]string) (secret, key string) {
	t.Helper()
	addr, file := flags["admin-addr"], flags["admin-token-file"]
	if addr == "" || file == "" {
		t.Fatalf("%s: --admin-addr %q, --admin-token-file %q: the admin endpoints the runbooks use are off", where, addr, file)
	}
	if _, ok := flags["admin-token"]; ok {
		t.Errorf("%s: --admin-token shows the token in the process list; use --admin-token-file", where)
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("%s: --admin-addr %q is not on the pod's loopback: other pods could reach the admin endpoints", where, addr)
	}
	admin := port(t, where, addr)
	for _, cp := range c.Ports {
		if int(cp.ContainerPort) == admin {
			t.Errorf("%s: container port %s is the admin port %d", where, cp.Name, admin)
		}
	}
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			if int(p.Port) == admin || p.TargetPort.IntValue() == admin {
				t.Errorf("%s: Service %s exposes the admin port %d", where, s.Name, admin)
			}
		}
	}
	for _, np := range m.netpols {
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port == nil || p.Port.IntValue() == admin {
					t.Errorf("%s: NetworkPolicy %s admits the admin port %d", where, np.Name, admin)
				}
			}
		}
	}

	// The token file: a key of a Secret volume.
	var vol *corev1.Volume
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			for i, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == vm.Name {
					vol = &d.Spec.Template.Spec.Volumes[i]
				}
			}
			if !vm.ReadOnly {
				t.Errorf("%s: the admin token's volume is mounted read-write", where)
			}
		}
	}
	if vol == nil || vol.Secret == nil {
		t.Fatalf("%s: --admin-token-file %s is not in a Secret volume", where, file)
	}
	sv := vol.Secret
	// serve refuses to start without the file, so a missing Secret must
	// hold the pod in ContainerCreating (Secret not found), not start it
	// to crash.
	if sv.Optional != nil && *sv.Optional {
		t.Errorf("%s: Secret %s is optional, but serve refuses to start without --admin-token-file", where, sv.SecretName)
	}
	missing := exec.Command(floodgateBinary(t), "serve", "--addr=127.0.0.1:0", "--admin-addr=127.0.0.1:0", "--admin-token-file="+filepath.Join(t.TempDir(), "token"))
	if out, err := missing.CombinedOutput(); err == nil || !strings.Contains(string(out), "--admin-token-file") {
		t.Errorf("serve with a missing --admin-token-file: %v %s; want a refusal (the Secret is required because of it)", err, out)
	}
	if sv.DefaultMode == nil || *sv.DefaultMode&0o077 != 0 {
		t.Errorf("%s: Secret volume %s's defaultMode %v: want the token readable by its owner only (0400)", where, vol.Name, sv.DefaultMode)
	}
	// The image's user (65532:65532) reads the root-owned file through
	// the pod's fsGroup.
	if sc := d.Spec.Template.Spec.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != 65532 {
		t.Errorf("%s: no fsGroup 65532: the image's user could not read the token file", where)
	}
	key = filepath.Base(file)
	for _, it := range sv.Items {
		if it.Path == key {
			key = it.Key
		}
	}
	return sv.SecretName, key
}

func durationFlag(t *testing.T, flags map[string]string, name string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := flags[name]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("--%s %q: %v", name, v, err)
	}
	return d
}

// compatDefaults are envoyproxy/ratelimit's port settings and defaults,
// which envoy-compat keeps.
var compatDefaults = map[string]int{"PORT": 8080, "GRPC_PORT": 8081, "DEBUG_PORT": 6070}

// TestKubernetesEnvoyCompat decodes the envoyproxy/ratelimit replacement
// strictly and runs its container here as the kubelet would: the image's
// binary with the Deployment's command and environment (REDIS_URL pointing
// at a real Redis, the ConfigMap written under RUNTIME_ROOT where it is
// mounted, ports moved to free ones after checking the declared ones match
// the environment). Its probe endpoint must answer 200, its metrics must be
// where the scrape annotations say, and Envoy's example routes must be
// limited by the ConfigMap's descriptors over gRPC.
func TestKubernetesEnvoyCompat(t *testing.T) {
	m := loadManifests(t, "kubernetes/envoy-compat")
	d, c := m.onlyDeployment(t)
	where := "Deployment " + d.Name
	if len(c.Command) != 2 || c.Command[0] != "/usr/local/bin/floodgate" || c.Command[1] != "envoy-compat" || len(c.Args) != 0 {
		t.Fatalf("%s: command %q args %q, want the image's floodgate envoy-compat", where, c.Command, c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Fatalf("%s: env %s: the replacement keeps plain values", where, e.Name)
		}
		env[e.Name] = e.Value
	}
	declared := map[string]string{"PORT": "http", "GRPC_PORT": "grpc", "DEBUG_PORT": "debug"}
	for name, portName := range declared {
		want := compatDefaults[name]
		if v, ok := env[name]; ok {
			want, _ = strconv.Atoi(v)
		}
		if got := containerPort(c, intstr.FromString(portName)); got != want {
			t.Errorf("%s: port %s is %d, but %s makes it listen on %d", where, portName, got, name, want)
		}
	}
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/port"] != strconv.Itoa(compatDefaults["DEBUG_PORT"]) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: Prometheus annotations %v, want the debug port's /metrics", where, ann)
	}
	checkCompatTermination(t, where, d, c)
	checkCompatHardening(t, where, m, d, c)

	if c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/healthcheck" || c.LivenessProbe == nil {
		t.Fatalf("%s: want readiness on envoyproxy/ratelimit's /healthcheck, and a liveness probe", where)
	}
	if c.LivenessProbe.GRPC != nil && containerPort(c, intstr.FromString("grpc")) != int(c.LivenessProbe.GRPC.Port) {
		t.Errorf("%s: gRPC liveness probe on %d, not the grpc port", where, c.LivenessProbe.GRPC.Port)
	}

	// Run it: the mounts under a temporary root, RUNTIME_ROOT moved there.
	redistest.Require(t)
	srv := redistest.Start(t)
	checkNetworkPolicy(t, where, m, d, c, "http", "grpc")
	mounts, root := m.materialize(t, d, c, nil)
	if _, ok := hostPath(mounts, env["RUNTIME_ROOT"]+"/"+env["RUNTIME_SUBDIRECTORY"]+"/config/x"); !ok {
		t.Fatalf("%s: nothing is mounted at $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config", where)
	}
	vars := compatVars(env, srv.Addr, root)
	bin := floodgateBinary(t)
	const listening = "floodgate envoy-compat listening"
	rec := launch(t, bin, c.Command[1:], vars, listening).Record(listening)
	httpAddr, grpcAddr, debugAddr := rec["http"], rec["grpc"], rec["debug"]

	// The probe turns 200 once Redis has answered.
	probe := c.ReadinessProbe.HTTPGet.Path
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := get(t, httpAddr, probe)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: probe GET %s: %d %s after 60s", where, probe, code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get(t, debugAddr, ann["prometheus.io/path"]); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("%s: GET %s on the debug port: %d", where, ann["prometheus.io/path"], code)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	clearOfMinuteTurn()
	checkEnvoyRoutes(t, where, func(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return client.ShouldRateLimit(ctx, req)
	})
	// After Envoy's routes, some allowed and some refused: the
	// dashboard's series of envoy-compat decisions are on the scrape,
	// with the labels and values its queries select.
	_, body := get(t, debugAddr, ann["prometheus.io/path"])
	checkDashboardCompatSeries(t, where, body)
}

// TestKubernetesDevRedis decodes the Redis manifest for trying the kit.
// Its pod must pass Pod Security "restricted" (loadManifests checks
// that), which the official redis image allows by starting as its redis
// user, 999:999 (its entrypoint drops from root to it only when started
// as root).
func TestKubernetesDevRedis(t *testing.T) {
	m := loadManifests(t, "kubernetes/dev")
	if len(m.deployments) != 1 || len(m.services) != 1 || m.services[0].Name != "redis" {
		t.Fatalf("want a redis Deployment and Service, have %d and %d", len(m.deployments), len(m.services))
	}
	d, c := m.onlyDeployment(t)
	if !strings.HasPrefix(c.Image, "docker.io/library/redis:") {
		t.Fatalf("Deployment %s runs %s: the user below is the official redis image's", d.Name, c.Image)
	}
	sc := d.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 999 || sc.RunAsGroup == nil || *sc.RunAsGroup != 999 || sc.FSGroup == nil || *sc.FSGroup != 999 {
		t.Errorf("Deployment %s: pod securityContext %+v, want runAsUser, runAsGroup and fsGroup 999 (the image's redis user)", d.Name, sc)
	}
}
