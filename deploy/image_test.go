package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// podman returns a function running podman on a private image store (a
// vfs storage under t.TempDir(), so the test neither sees nor leaves
// images in the machine's store). Without podman the test fails when the
// CI environment variable is set and is skipped otherwise.
func podman(t *testing.T) (run func(args ...string) ([]byte, error), env []string) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("podman is not installed (.ci/run installs podman and buildah): the container image cannot be built and tested: %v", err)
		}
		t.Skipf("podman not found, skipping the container image test (apt-get install podman buildah to run it): %v", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "storage.conf")
	text := fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n",
		filepath.Join(dir, "graph"), filepath.Join(dir, "run"))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	env = []string{"CONTAINERS_STORAGE_CONF=" + conf}
	run = func(args ...string) ([]byte, error) {
		cmd := exec.Command("podman", args...)
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("podman %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out, nil
	}
	return run, env
}

// imageConfig is the part of `podman image inspect` the test reads.
type imageConfig struct {
	Config struct {
		User         string
		ExposedPorts map[string]struct{}
		Env          []string
		Entrypoint   []string
		Cmd          []string
		Labels       map[string]string
	}
}

// TestContainerImage builds the image the way docs/deploy.md says
// (deploy/build-image.sh: a static binary compiled here, copied into the
// Containerfile's scratch image), checks its configuration, exports its
// filesystem and runs the binary found there against a real Redis, with
// the image's own default command.
func TestContainerImage(t *testing.T) {
	run, env := podman(t)
	redistest.Require(t)
	const tag = "localhost/floodgate:deploy-test"
	version := "v0.0.0-deploytest." + strconv.FormatInt(time.Now().Unix(), 10)

	build := exec.Command("bash", "build-image.sh", tag)
	build.Env = append(append(os.Environ(), env...), "VERSION="+version, "ENGINE=podman")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/build-image.sh: %v\n%s", err, out)
	}

	out, err := run("image", "inspect", tag)
	if err != nil {
		t.Fatal(err)
	}
	var images []imageConfig
	if err := json.Unmarshal(out, &images); err != nil || len(images) != 1 {
		t.Fatalf("podman image inspect: %d images, %v\n%s", len(images), err, out)
	}
	cfg := images[0].Config
	uid, _, _ := strings.Cut(cfg.User, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("image user %q: want a numeric non-root uid (so runAsNonRoot can verify it)", cfg.User)
	}
	if got, want := cfg.Entrypoint, []string{"/usr/local/bin/floodgate"}; !slices.Equal(got, want) {
		t.Errorf("entrypoint %q, want %q", got, want)
	}
	if len(cfg.Cmd) == 0 || cfg.Cmd[0] != "serve" {
		t.Fatalf("default command %q, want floodgate serve", cfg.Cmd)
	}
	addr := flagValue(cfg.Cmd[1:], "addr")
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		t.Errorf("default command %q: --addr %q does not listen on all interfaces", cfg.Cmd, addr)
	}
	for _, p := range []string{port + "/tcp", "8081/tcp"} {
		if _, ok := cfg.ExposedPorts[p]; !ok {
			t.Errorf("port %s is not exposed: %v", p, cfg.ExposedPorts)
		}
	}
	if got := cfg.Labels["org.opencontainers.image.version"]; got != version {
		t.Errorf("version label %q, want %q", got, version)
	}

	files := exportImage(t, run, tag, "usr/local/bin/floodgate", "etc/ssl/certs/ca-certificates.crt")
	bin := files["usr/local/bin/floodgate"]
	checkStatic(t, bin, version)
	if info, err := os.Stat(files["etc/ssl/certs/ca-certificates.crt"]); err != nil || info.Size() == 0 {
		t.Errorf("the image has no CA certificates (rediss:// needs them): %v", err)
	}

	// The binary from the image, with the image's default command, on a
	// free port on all interfaces, sharing a real Redis.
	srv := redistest.Start(t)
	args := withFlag(cfg.Cmd, "addr", net.JoinHostPort(host, "0"))
	args = append(args, "--redis", "redis://"+srv.Addr)
	s := startService(t, bin, args, nil, false, false)
	if code, body := get(t, s.httpAddr, "/healthz"); code != 200 {
		t.Errorf("GET /healthz: %d %s", code, body)
	}
	if code, body := get(t, s.httpAddr, "/readyz"); code != 200 {
		t.Errorf("GET /readyz: %d %s", code, body)
	}
	code, reply := post(t, s.httpAddr, "/v1/check", `{"policy":"login","identity":{"account":"alice","ip":"203.0.113.7"}}`)
	if code != 200 || reply["allowed"] != true {
		t.Errorf("POST /v1/check: %d %v, want 200 and allowed", code, reply)
	}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	keys, err := rc.Keys(context.Background(), "fg*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("the decision left no fg* key in Redis (%v, %v): it was not taken there", keys, err)
	}
}

// exportImage copies the named files of the image's filesystem into a
// temporary directory and returns their paths. It exports a container
// created from the image (never started); where creating one is refused
// it mounts the image instead.
func exportImage(t *testing.T, run func(...string) ([]byte, error), tag string, names ...string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	found := map[string]string{}
	name := fmt.Sprintf("floodgate-deploy-test-%d", os.Getpid())
	if _, err := run("create", "--name", name, tag); err == nil {
		defer run("rm", name)
		tarPath := filepath.Join(dir, "rootfs.tar")
		if _, err := run("export", "-o", tarPath, name); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(tarPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reading the exported filesystem: %v", err)
			}
			clean := strings.TrimPrefix(filepath.Clean(h.Name), "/")
			if !slices.Contains(names, clean) || h.Typeflag != tar.TypeReg {
				continue
			}
			dst := filepath.Join(dir, filepath.Base(clean))
			w, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode)&0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(w, tr); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			found[clean] = dst
		}
	} else {
		t.Logf("podman create refused (%v); mounting the image instead", err)
		out, err := run("image", "mount", tag)
		if err != nil {
			t.Fatal(err)
		}
		defer run("image", "unmount", tag)
		root := strings.TrimSpace(string(out))
		for _, n := range names {
			data, err := os.ReadFile(filepath.Join(root, n))
			if err != nil {
				continue
			}
			info, err := os.Stat(filepath.Join(root, n))
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(dir, filepath.Base(n))
			if err := os.WriteFile(dst, data, info.Mode()&0o755); err != nil {
				t.Fatal(err)
			}
			found[n] = dst
		}
	}
	for _, n := range names {
		if found[n] == "" {
			t.Fatalf("the image has no regular file %s", n)
		}
	}
	return found
}

// checkStatic checks that bin is a static executable built with -trimpath
// and CGO_ENABLED=0, and that --version prints version.
func checkStatic(t *testing.T, bin, version string) {
	t.Helper()
	info, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable: %v", bin, info.Mode())
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (program header %v): it cannot run on an empty base image", p.Type)
		}
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("floodgate --version: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "floodgate version "+version; got != want {
		t.Errorf("floodgate --version printed %q, want %q", got, want)
	}
}

// flagValue returns the value of --name in args ("--name v" or
// "--name=v"), or "" when it is absent.
func flagValue(args []string, name string) string {
	for i, a := range args {
		switch {
		case a == "--"+name && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"=")
		}
	}
	return ""
}

// withFlag returns a copy of args with the value of --name replaced.
func withFlag(args []string, name, value string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		switch {
		case a == "--"+name && i+1 < len(out):
			out[i+1] = value
			return out
		case strings.HasPrefix(a, "--"+name+"="):
			out[i] = "--" + name + "=" + value
			return out
		}
	}
	return append(out, "--"+name, value)
}

// TestContainerfileStages checks, without building, that the two ways of
// building the image end in the same place: the source stage runs the
// script that deploy/build-image.sh runs for the prebuilt stage, both put
// floodgate and ca-certificates.crt in /out, and the final stage takes
// them from the stage BINARY names (source by default).
func TestContainerfileStages(t *testing.T) {
	raw, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(string(raw), "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	stage := ""
	stages := map[string][]string{}
	for _, l := range lines {
		if f := strings.Fields(l); f[0] == "FROM" {
			stage = "final"
			if len(f) == 4 && f[2] == "AS" {
				stage = f[3]
			}
			if _, dup := stages[stage]; dup {
				t.Fatalf("stage %s twice", stage)
			}
		}
		stages[stage] = append(stages[stage], l)
	}
	want := map[string][]string{
		"":         {"ARG BINARY=source"},
		"source":   {`RUN VERSION="$VERSION" bash deploy/build-image.sh --binary-only /out`},
		"prebuilt": {"FROM scratch AS prebuilt", "COPY floodgate ca-certificates.crt /out/"},
		"binary":   {"FROM ${BINARY} AS binary"},
		"final": {"FROM scratch",
			"COPY --from=binary /out/floodgate /usr/local/bin/floodgate",
			"COPY --from=binary /out/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt"},
	}
	for s, ls := range want {
		for _, l := range ls {
			if !slices.Contains(stages[s], l) {
				t.Errorf("stage %q lacks %q; it has %q", s, l, stages[s])
			}
		}
	}
	script, err := os.ReadFile("build-image.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`-o "$out/floodgate"`, `"$out/ca-certificates.crt"`, "CGO_ENABLED=0", "-trimpath", "-X main.version=$VERSION", "BINARY=prebuilt"} {
		if !strings.Contains(string(script), s) {
			t.Errorf("build-image.sh lacks %s", s)
		}
	}
}

// TestContainerBuildContext sends the repository's root as the build
// context, as `docker build -f deploy/Containerfile .` and compose.yaml
// do, through its .dockerignore, into an image of its own, and runs the
// Containerfile's source stage's command on what arrived: the binary must
// build from it. Git's data, the documentation and the other modules must
// have stayed out.
func TestContainerBuildContext(t *testing.T) {
	run, _ := podman(t)
	dir := t.TempDir()
	cf := filepath.Join(dir, "Containerfile")
	if err := os.WriteFile(cf, []byte("FROM scratch\nCOPY . /ctx/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if _, err := run("build", "-q", "-f", cf, "-o", "type=local,dest="+out, ".."); err != nil {
		t.Fatal(err)
	}
	ctx := filepath.Join(out, "ctx")
	for _, p := range []string{"go.mod", "go.sum", "deploy/build-image.sh", "deploy/Containerfile", "cmd/floodgate", "redisstore/lua"} {
		if _, err := os.Stat(filepath.Join(ctx, p)); err != nil {
			t.Errorf("the build context lacks %s: %v", p, err)
		}
	}
	for _, p := range []string{".git", "docs", "bench", "deploy/kubernetes", "deploy/go.mod"} {
		if _, err := os.Lstat(filepath.Join(ctx, p)); err == nil {
			t.Errorf("the build context holds %s (.dockerignore should keep it out)", p)
		}
	}
	bin := filepath.Join(dir, "bin")
	build := exec.Command("bash", "deploy/build-image.sh", "--binary-only", bin)
	build.Dir = ctx
	build.Env = append(os.Environ(), "VERSION=v0.0.0-context")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the source stage's build-image.sh --binary-only on the build context: %v\n%s", err, b)
	}
	checkStatic(t, filepath.Join(bin, "floodgate"), "v0.0.0-context")
}
