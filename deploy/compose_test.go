package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

const composeFile = "compose.yaml"

// loadCompose loads compose.yaml with the Compose Specification's own
// loader: schema validation (unknown keys fail), interpolation,
// normalization and consistency checks, relative paths resolved.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	details := types.ConfigDetails{
		WorkingDir:  wd,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(wd, composeFile)}},
		Environment: types.Mapping{},
	}
	p, err := loader.LoadWithContext(context.Background(), details, func(o *loader.Options) {
		o.SetProjectName("floodgate", true)
		o.ResolvePaths = true
	})
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return p
}

// composeMounts returns a service's bind mounts, failing t for any whose
// source is missing from the repository.
func composeMounts(t *testing.T, svc types.ServiceConfig) []mount {
	t.Helper()
	var out []mount
	for _, v := range svc.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if _, err := os.Stat(v.Source); err != nil {
			t.Errorf("%s: service %s mounts %s, which does not exist: %v", composeFile, svc.Name, v.Source, err)
			continue
		}
		if !v.ReadOnly {
			t.Errorf("%s: service %s mounts %s read-write; the kit's files are read-only inputs", composeFile, svc.Name, v.Source)
		}
		out = append(out, mount{target: v.Target, source: v.Source})
	}
	return out
}

// hostFile returns the repository file a service sees at p.
func hostFile(t *testing.T, svc types.ServiceConfig, mounts []mount, p string) string {
	t.Helper()
	h, ok := hostPath(mounts, p)
	if !ok {
		t.Fatalf("%s: service %s has nothing mounted at %s", composeFile, svc.Name, p)
	}
	return h
}

func samePath(t *testing.T, got, want string) bool {
	t.Helper()
	g, err1 := filepath.Abs(got)
	w, err2 := filepath.Abs(want)
	return err1 == nil && err2 == nil && g == w
}

// TestCompose validates compose.yaml and what it wires together: every
// mounted file exists; Floodgate is built from the Containerfile, its
// command runs here (against a real Redis) and serves the example's
// policies and Envoy's routes; Envoy, Prometheus and Grafana load the
// kit's files and reach the services by their compose names and ports.
func TestCompose(t *testing.T) {
	p := loadCompose(t)
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"admin-token", "envoy", "floodgate", "grafana", "prometheus", "redis"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}

	fg := p.Services["floodgate"]
	if fg.Build == nil || !samePath(t, filepath.Join(fg.Build.Context, fg.Build.Dockerfile), "Containerfile") {
		t.Errorf("floodgate is not built from deploy/Containerfile: %+v", fg.Build)
	} else if _, err := os.Stat(filepath.Join(fg.Build.Context, "go.mod")); err != nil {
		t.Errorf("floodgate's build context %s is not the repository's root: %v", fg.Build.Context, err)
	}
	fgMounts := composeMounts(t, fg)
	flags := flagArgs(t, composeFile+" floodgate", fg.Command)
	if got := port(t, composeFile, flags["addr"]); got != httpPort {
		t.Errorf("floodgate --addr port %d, want %d", got, httpPort)
	}
	if got := port(t, composeFile, flags["grpc-addr"]); got != grpcPort {
		t.Errorf("floodgate --grpc-addr port %d, want %d", got, grpcPort)
	}
	if !samePath(t, hostFile(t, fg, fgMounts, flags["envoy-config"]), descriptorsFile) {
		t.Errorf("floodgate --envoy-config %s is not %s", flags["envoy-config"], descriptorsFile)
	}
	if !strings.Contains(flags["redis"], "//redis:6379") {
		t.Errorf("floodgate --redis %q does not name the compose file's redis service", flags["redis"])
	}
	// Termination: serve turns readiness off, serves on for
	// --shutdown-delay, drains HTTP for up to --drain-timeout, then gRPC
	// for up to --drain-timeout again. Docker kills the container
	// stop_grace_period (default 10 s) after its SIGTERM.
	delay, drain := durationFlag(t, flags, "shutdown-delay", 0), durationFlag(t, flags, "drain-timeout", 10*time.Second)
	if fg.StopGracePeriod == nil {
		t.Errorf("%s: floodgate has no stop_grace_period: Docker's 10 s default kills it before the worst-case drain (%v)", composeFile, delay+2*drain)
	} else if grace, need := time.Duration(*fg.StopGracePeriod), delay+2*drain; grace < need {
		t.Errorf("%s: floodgate stop_grace_period %v < shutdown delay + 2 × drain timeout = %v", composeFile, grace, need)
	}
	published := map[uint32]bool{}
	for _, pc := range fg.Ports {
		published[pc.Target] = true
	}
	adminPort := uint32(port(t, composeFile, flags["admin-addr"]))
	if !published[httpPort] || !published[grpcPort] || !published[adminPort] {
		t.Errorf("floodgate publishes %v, want %d, %d and %d (admin)", fg.Ports, httpPort, grpcPort, adminPort)
	}
	checkComposeLoopback(t, p)
	token, tokenMount := checkComposeAdminToken(t, p, flags["admin-token-file"])
	fgMounts = append(fgMounts, tokenMount)

	// Envoy loads the example and reaches Floodgate by its service name.
	envoy := p.Services["envoy"]
	if !samePath(t, hostFile(t, envoy, composeMounts(t, envoy), "/etc/envoy/envoy.yaml"), envoyFile) {
		t.Errorf("envoy does not load %s at /etc/envoy/envoy.yaml", envoyFile)
	}
	b := loadBootstrap(t, envoyFile)
	_, rl := ingress(t, b, "ingress")
	cl := cluster(t, b, rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName())
	for _, e := range cl.GetLoadAssignment().GetEndpoints() {
		for _, lb := range e.GetLbEndpoints() {
			if h := lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress(); h != "floodgate" {
				t.Errorf("Envoy's cluster %s points at host %q, not the compose service floodgate", cl.GetName(), h)
			}
		}
	}

	checkComposePrometheus(t, p.Services["prometheus"])
	checkComposeGrafana(t, p.Services["grafana"])

	// Floodgate's own command, run here against a real Redis.
	redistest.Require(t)
	srv := redistest.Start(t)
	s := runAsContainer(t, composeFile, fg.Command, fgMounts, "redis://"+srv.Addr+"/0")
	checkServing(t, composeFile, s)
	checkAdmin(t, composeFile, s, token)
}

// checkComposeLoopback checks that every port the compose file publishes
// is on the host's loopback only: Floodgate's APIs and Envoy's admin
// authenticate no caller, Prometheus neither, Grafana lets anyone view.
func checkComposeLoopback(t *testing.T, p *types.Project) {
	t.Helper()
	for name, svc := range p.Services {
		for _, pc := range svc.Ports {
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("%s: service %s publishes %d on %q, not on 127.0.0.1: every interface of the host would serve it", composeFile, name, pc.Target, pc.HostIP)
			}
		}
	}
}

// checkComposeAdminToken checks how Floodgate gets its admin token
// (--admin-token-file, file): from a named volume that the admin-token
// service fills before Floodgate starts and Floodgate mounts read-only.
// It runs that service's script here, in a temporary directory standing
// for the volume (chown a no-op unless root), and returns the token it
// wrote and the mount of that directory where Floodgate mounts the volume.
func checkComposeAdminToken(t *testing.T, p *types.Project, file string) (string, mount) {
	t.Helper()
	fg, gen := p.Services["floodgate"], p.Services["admin-token"]
	volumeAt := func(svc types.ServiceConfig, dir string) *types.ServiceVolumeConfig {
		for i, v := range svc.Volumes {
			if v.Type == types.VolumeTypeVolume && strings.TrimSuffix(v.Target, "/") == dir {
				return &svc.Volumes[i]
			}
		}
		return nil
	}
	dir := filepath.ToSlash(filepath.Dir(file))
	fv := volumeAt(fg, dir)
	if fv == nil {
		t.Fatalf("%s: floodgate --admin-token-file %s is not in a named volume mounted at %s", composeFile, file, dir)
	}
	if !fv.ReadOnly {
		t.Errorf("%s: floodgate mounts volume %s read-write", composeFile, fv.Source)
	}
	if dep, ok := fg.DependsOn["admin-token"]; !ok || dep.Condition != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("%s: floodgate does not wait for admin-token to complete: %+v", composeFile, fg.DependsOn)
	}
	var gv *types.ServiceVolumeConfig
	for i, v := range gen.Volumes {
		if v.Source == fv.Source {
			gv = &gen.Volumes[i]
		}
	}
	if gv == nil || gv.ReadOnly {
		t.Fatalf("%s: admin-token does not write volume %s", composeFile, fv.Source)
	}
	if !slices.Equal([]string(gen.Entrypoint), []string{"sh", "-c"}) || len(gen.Command) != 1 {
		t.Fatalf("%s: admin-token runs %q %q, want sh -c and one script", composeFile, gen.Entrypoint, gen.Command)
	}
	script := gen.Command[0]
	written := strings.TrimSuffix(gv.Target, "/") + "/" + filepath.Base(file)
	for _, want := range []string{"chown 65532:65532 " + written, "chmod 0400 " + written} {
		if !strings.Contains(script, want) {
			t.Errorf("%s: admin-token's script does not %q (the image's user must read it, alone)", composeFile, want)
		}
	}
	tmp := t.TempDir()
	script = strings.ReplaceAll(script, strings.TrimSuffix(gv.Target, "/")+"/", tmp+"/")
	if os.Geteuid() != 0 {
		script = "chown() { :; }; " + script
	}
	for range 2 { // the second run, at the next up, keeps the token
		if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("admin-token's script: %v\n%s", err, out)
		}
	}
	path := filepath.Join(tmp, filepath.Base(file))
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o400 {
		t.Errorf("admin-token's token file: %v %v, want mode 0400", info.Mode(), err)
	}
	token := string(raw)
	if len(token) != 64 || strings.Trim(token, "0123456789abcdef") != "" {
		t.Errorf("admin-token wrote %q, want 64 hex digits", token)
	}
	return token, mount{target: dir, source: tmp}
}

// checkComposePrometheus checks that Prometheus loads the kit's
// prometheus.yml, whose rule file is the shipped alerts.yml and whose
// target is Floodgate's HTTP port, and runs promtool check config on it
// when promtool is installed.
func checkComposePrometheus(t *testing.T, svc types.ServiceConfig) {
	t.Helper()
	mounts := composeMounts(t, svc)
	confPath := "/etc/prometheus/prometheus.yml"
	conf := hostFile(t, svc, mounts, confPath)
	raw, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var pc struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &pc); err != nil {
		t.Fatalf("%s: %v", conf, err)
	}
	var rules []string
	for _, r := range pc.RuleFiles {
		if !filepath.IsAbs(r) {
			r = filepath.Join(filepath.Dir(confPath), r)
		}
		rules = append(rules, hostFile(t, svc, mounts, r))
	}
	if !slices.ContainsFunc(rules, func(r string) bool { return samePath(t, r, "prometheus/alerts.yml") }) {
		t.Errorf("Prometheus's rule files %v do not include the shipped prometheus/alerts.yml", pc.RuleFiles)
	}
	want := "floodgate:" + strconv.Itoa(httpPort)
	found := false
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			found = found || slices.Contains(st.Targets, want)
		}
	}
	if !found {
		t.Errorf("Prometheus does not scrape %s", want)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "config", conf).CombinedOutput(); err != nil {
			t.Errorf("promtool check config %s: %v\n%s", conf, err, out)
		}
	}
}

// checkComposeGrafana checks that Grafana is provisioned with the compose
// file's Prometheus as its data source and loads the shipped dashboard.
func checkComposeGrafana(t *testing.T, svc types.ServiceConfig) {
	t.Helper()
	mounts := composeMounts(t, svc)
	dsDir := hostFile(t, svc, mounts, "/etc/grafana/provisioning/datasources")
	dbDir := hostFile(t, svc, mounts, "/etc/grafana/provisioning/dashboards")
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, Type, Access, URL string
			IsDefault               bool `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	strictYAML(t, filepath.Join(dsDir, "prometheus.yaml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" || !ds.Datasources[0].IsDefault {
		t.Errorf("Grafana's data sources %+v: want the compose file's Prometheus as default", ds.Datasources)
	}
	var db struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Type string
			Options    struct{ Path string }
		} `yaml:"providers"`
	}
	strictYAML(t, filepath.Join(dbDir, "floodgate.yaml"), &db)
	if len(db.Providers) != 1 || db.Providers[0].Type != "file" {
		t.Fatalf("Grafana's dashboard providers %+v: want one file provider", db.Providers)
	}
	dash := hostFile(t, svc, mounts, db.Providers[0].Options.Path+"/floodgate.json")
	if !samePath(t, dash, "grafana/floodgate.json") {
		t.Errorf("Grafana's dashboard directory holds %s, not the shipped grafana/floodgate.json", dash)
	}
}

// strictYAML decodes the file at path into v, failing t on unknown fields.
func strictYAML(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
