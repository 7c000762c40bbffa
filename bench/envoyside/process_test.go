package envoyside

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// This file runs the two services as an outside reviewer would: their
// binary (cmd/envoyratelimit, their runner built from their module) and
// `floodgate envoy-compat`, each a process started with the same
// environment variables and configuration directory, each on its own
// redis-server, and compares what they answer over the network: gRPC
// ShouldRateLimit, POST /json, /healthcheck and /rlconfig.

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds their service and floodgate once per test binary.
func binaries(t *testing.T) (theirs, ours string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "envoyside-bin-")
		if buildErr != nil {
			return
		}
		// floodgate is built in its own module (bench's go.sum does
		// not list the command's dependencies).
		for _, b := range [][3]string{
			{"theirs", "github.com/floodgate-rl/floodgate/bench/cmd/envoyratelimit", "."},
			{"floodgate", "./cmd/floodgate", "../.."},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b[0]), b[1])
			cmd.Dir = b[2]
			out, err := cmd.CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "theirs"), filepath.Join(binDir, "floodgate")
}

// svcProc is one service process, stopped by its own pid.
type svcProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	http string // http://host:port
	dbg  string
	conn *grpc.ClientConn
	rls  rlspb.RateLimitServiceClient
}

func (p *svcProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *svcProc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, l)
		if p := l.Addr().(*net.TCPAddr).Port; p != 6379 {
			out = append(out, p)
		}
	}
	return out
}

// startSvc starts bin with args and exactly env plus its ports and Redis.
func startSvc(t *testing.T, name, bin string, args []string, env map[string]string, redisAddr, dir string) *svcProc {
	t.Helper()
	ports := freeLoopbackPorts(t, 3)
	full := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
	}
	for k, v := range env {
		full = append(full, k+"="+v)
	}
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = full, dir, lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &svcProc{cmd: cmd, log: logPath, done: make(chan struct{}),
		http: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), dbg: fmt.Sprintf("http://127.0.0.1:%d", ports[2])}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	// Wait (not an assertion: the bound only ends a hung start) until
	// both HTTP and gRPC answer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.http + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited at start:\n%s", name, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy after 30 s:\n%s", name, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.conn, err = grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", ports[1]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.conn.Close() })
	p.rls = rlspb.NewRateLimitServiceClient(p.conn)
	return p
}

// pair is their service and envoy-compat over the same configuration
// and environment, each on its own redis-server.
type pair struct {
	theirs, ours         *svcProc
	theirRedis, ourRedis *redistest.Server
}

func startPair(t *testing.T, env map[string]string, config string) *pair {
	t.Helper()
	theirBin, ourBin := binaries(t)
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "rt", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all := map[string]string{
		"RUNTIME_ROOT": filepath.Join(dir, "rt"), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"USE_STATSD": "false", "LOG_LEVEL": "error",
	}
	for k, v := range env {
		all[k] = v
	}
	r1, r2 := redistest.Start(t), redistest.Start(t)
	return &pair{
		theirs:     startSvc(t, "theirs", theirBin, nil, all, r1.Addr, dir),
		ours:       startSvc(t, "ours", ourBin, []string{"envoy-compat"}, all, r2.Addr, dir),
		theirRedis: r1, ourRedis: r2,
	}
}

// httpAnswer is what an HTTP endpoint answered, for comparison.
type httpAnswer struct {
	code  int
	ctype string
	body  string
}

func doHTTP(t *testing.T, method, url, body string) httpAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpAnswer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

// sameJSON compares their /json answer a with ours b: status, content
// type, and the body as a RateLimitResponse when both are one, else byte
// for byte. protojson varies its white space from one build to another
// on purpose, so theirs may carry spaces; ours must be compact, as their
// builds without spaces write it.
func sameJSON(a, b httpAnswer) bool {
	if a.code != b.code || a.ctype != b.ctype {
		return false
	}
	var ra, rb rlspb.RateLimitResponse
	if protojson.Unmarshal([]byte(a.body), &ra) == nil && protojson.Unmarshal([]byte(b.body), &rb) == nil {
		var c bytes.Buffer
		if json.Compact(&c, []byte(b.body)) != nil || c.String() != b.body {
			return false
		}
		return proto.Equal(textSpaces(moduleMetadata(&ra)), &rb)
	}
	return a.body == b.body
}

// moduleMetadata removes from their answer what only their module (January
// 2026) writes in the dynamic metadata: "quotaModeEnabled" (always, false
// without quota descriptors) and "quotaModeViolations". Their main
// dropped both (commit 3728d99, "Send user defined metadata to the
// client"), and envoy-compat follows main.
func moduleMetadata(r *rlspb.RateLimitResponse) *rlspb.RateLimitResponse {
	if r.GetDynamicMetadata() == nil {
		return r
	}
	c := proto.Clone(r).(*rlspb.RateLimitResponse)
	delete(c.DynamicMetadata.Fields, "quotaModeEnabled")
	delete(c.DynamicMetadata.Fields, "quotaModeViolations")
	return c
}

// textSpaces undoes the spacing protobuf's text format varies on purpose
// from one build to another (two spaces between fields in some builds) in
// their answer: their dynamic metadata carries a limit override as that
// text. Ours must have one space (compared as it is).
func textSpaces(r *rlspb.RateLimitResponse) *rlspb.RateLimitResponse {
	md := r.GetDynamicMetadata()
	if md == nil {
		return r
	}
	for _, d := range md.GetFields()["descriptors"].GetListValue().GetValues() {
		if l, ok := d.GetStructValue().GetFields()["limit"]; ok {
			s := l.GetStringValue()
			for strings.Contains(s, "  ") {
				s = strings.ReplaceAll(s, "  ", " ")
			}
			d.GetStructValue().Fields["limit"] = structpb.NewStringValue(s)
		}
	}
	return r
}

// action is one request of a sequence: gRPC (req) or POST /json (body).
// "{s}" in values and bodies is replaced by the attempt's suffix.
type action struct {
	req  step
	body string
}

func (a action) String() string {
	if a.body != "" {
		return "POST /json " + a.body
	}
	return fmt.Sprintf("gRPC %v", a.req)
}

func withSuffix(s step, sfx string) step {
	c := s
	c.descs = nil
	for _, d := range s.descs {
		c.descs = append(c.descs, strings.ReplaceAll(d, "{s}", sfx))
	}
	return c
}

// compareOnce runs seq once against both services, theirs first for
// each request, and returns the first difference ("" when none).
func (p *pair) compareOnce(t *testing.T, seq []action, sfx string) string {
	ctx := context.Background()
	for i, a := range seq {
		for k := range max(a.req.n, 1) {
			if a.body != "" {
				body := strings.ReplaceAll(a.body, "{s}", sfx)
				ta := doHTTP(t, http.MethodPost, p.theirs.http+"/json", body)
				oa := doHTTP(t, http.MethodPost, p.ours.http+"/json", body)
				if !sameJSON(ta, oa) {
					return fmt.Sprintf("#%d.%d POST /json %s\ntheirs %d %q %s\nours   %d %q %s", i, k, body, ta.code, ta.ctype, ta.body, oa.code, oa.ctype, oa.body)
				}
				continue
			}
			req := request(withSuffix(a.req, sfx))
			tr, terr := p.theirs.rls.ShouldRateLimit(ctx, req)
			or, oerr := p.ours.rls.ShouldRateLimit(ctx, req)
			ts, ost := status.Convert(terr), status.Convert(oerr)
			if ts.Code() != ost.Code() || ts.Message() != ost.Message() || !proto.Equal(textSpaces(moduleMetadata(tr)), or) {
				return fmt.Sprintf("#%d.%d gRPC %v\ntheirs %v %v\nours   %v %v", i, k, withSuffix(a.req, sfx), tr, terr, or, oerr)
			}
		}
	}
	return ""
}

// compare runs seq against both services and fails on a difference. A
// sequence that straddles a second boundary may see their service in
// one window and ours in the next; such a run is repeated with fresh
// counters (a new suffix), and a difference within one second fails.
func (p *pair) compare(t *testing.T, name string, seq []action) {
	t.Helper()
	for attempt := range 6 {
		// Keep clear of a minute boundary, which would split the
		// minute counters of one run.
		if now := time.Now(); now.Second() >= 58 {
			time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 20*time.Millisecond).Sub(now))
		}
		start := time.Now().Unix()
		diff := p.compareOnce(t, seq, fmt.Sprintf("%s%d_%d", strings.ReplaceAll(name, " ", ""), attempt, start))
		if diff == "" {
			return
		}
		if time.Now().Unix() == start {
			t.Errorf("%s: answers differ:\n%s", name, diff)
			return
		}
		t.Logf("%s: attempt %d crossed a second boundary; again with fresh counters (%s)", name, attempt, diff)
	}
	t.Errorf("%s: every attempt crossed a second boundary", name)
}

// processConfig is the configuration both processes load.
const processConfig = `domain: side
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: never
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: det
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: wild
    value: "ab*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: star
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: cat
    value: account
    rate_limit: {unit: minute, requests_per_unit: 4, replaces: [{name: per_user}]}
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: route
    value: /api
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: user
        descriptors:
          - key: op
            value: write
            rate_limit: {unit: minute, requests_per_unit: 3}
`

func g(domain string, hits uint32, n int, descs ...string) action {
	return action{req: step{domain, hits, descs, n}}
}

func j(body string) action { return action{body: body} }

// processCases are the sequences compared; each runs on counters of its
// own (values carry the suffix {s}).
var processCases = []struct {
	name string
	seq  []action
}{
	{"unknown domain", []action{g("nowhere", 1, 2, "key2={s}")}},
	{"minute limit to the boundary and past", []action{g("side", 1, 22, "key2={s}")}},
	{"hour limit", []action{g("side", 1, 11, "key3={s}")}},
	{"day limit", []action{g("side", 1, 4, "day={s}")}},
	{"second limit", []action{g("side", 1, 3, "sec={s}")}},
	{"two descriptors one over", []action{g("side", 1, 12, "key2={s}", "key3={s}")}},
	{"value-less key counts each value", []action{g("side", 1, 2, "user=a{s}"), g("side", 1, 2, "user=b{s}")}},
	{"costs", []action{g("side", 5, 1, "key2={s}"), g("side", 15, 1, "key2={s}"), g("side", 1, 1, "key2={s}"), g("side", 30, 1, "key2=c{s}")}},
	{"zero cost and descriptor costs", []action{g("side", 0, 1, "key2={s}"), g("side", 19, 1, "key2={s}"), g("side", 7, 1, "key2={s}+0"), g("side", 0, 1, "key2={s}+1"), g("side", 0, 1, "key2={s}+1")}},
	{"descriptor cost beyond 32 bits", []action{g("side", 1, 1, "key2={s}+4294967297"), g("side", 1, 1, "key2={s}")}},
	{"request cost at 32-bit maximum", []action{g("side", 4294967295, 2, "key2={s}")}},
	{"shadow", []action{g("side", 1, 4, "shadow={s}", "key2={s}")}},
	{"unlimited and zero", []action{g("side", 1, 2, "free={s}", "never={s}", "key2={s}")}},
	{"detailed_metric", []action{g("side", 1, 3, "det={s}")}},
	{"prefix wildcard", []action{g("side", 1, 3, "wild=ab{s}"), g("side", 1, 3, "wild=ab"), g("side", 1, 1, "wild=xab{s}")}},
	{"star wildcard", []action{g("side", 1, 3, "star=q{s}"), g("side", 1, 3, "star=r{s}"), g("side", 1, 3, "star=")}},
	{"replaces", []action{g("side", 1, 2, "user=u{s}"), g("side", 1, 5, "user=u{s}", "cat=account")}},
	{"nested", []action{
		g("side", 1, 3, "route=/api,method=GET{s}"), g("side", 1, 1, "route=/api"),
		g("side", 1, 1, "route=/api,method=GET{s},extra=1"), g("side", 1, 4, "route=/api,user=u{s},op=write"),
		g("side", 1, 1, "route=/api,user=u{s},op=read"), g("side", 1, 1, "route=/api,user=u{s}"),
	}},
	{"no matching rule beside a matched one", []action{g("side", 1, 2, "nomatch={s}", "day=n{s}")}},
	{"empty entries", []action{g("side", 1, 1, "")}},
	{"empty value", []action{g("side", 1, 2, "user=")}},
	{"many descriptors", []action{g("side", 1, 1, "key2=1{s}", "key2=2{s}", "key2=3{s}", "key2=4{s}", "key2=5{s}", "key2=6{s}", "key2=7{s}", "key2=8{s}", "key2=9{s}", "key2=10{s}", "key2=11{s}", "key2=12{s}", "key2=13{s}", "key2=14{s}", "key2=15{s}", "key2=16{s}", "key2=17{s}", "key2=18{s}")}},
	{"same counter twice in one request", []action{g("side", 1, 11, "key3={s}", "key3={s}")}},
	{"limit overrides", []action{g("side", 1, 3, "key2={s}@2/MINUTE"), g("side", 2, 2, "other={s}@3/HOUR", "key3={s}@5/SECOND+1")}},
	{"empty domain", []action{g("", 1, 1, "key2={s}")}},
	{"no descriptors", []action{g("side", 1, 1)}},
	{"json: limits and errors", []action{
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"never","value":"{s}"}]}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}],"hitsAddend":"30"}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}],"hits_addend":1.0}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key3","value":"{s}"}],"hitsAddend":"3"}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key3","value":"\u0061{s}"}]}]}`),
		j(` {"domain" : "side" ,"descriptors":[ {"entries":[{"value":"{s}","key":"key3"}]} ] } `),
		j(`{"domain":"nowhere","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}]}`),
		j(`{"domain":"side","descriptors":[]}`),
		j(`{"domain":"side"}`),
		j(`{"domain":"","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}]}`),
		j(`{"descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[]}]}`),
		j(`{"domain":"side","descriptors":[{}]}`),
		j(`{"domain":"side","descriptors":null}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}],"bogus":1}`),
		j(`{"domain":"side","domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}],"hitsAddend":1,"hits_addend":2}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}]} x`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}],"hitsAddend":-1}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}],"hitsAddend":01}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}],"hitsAddend":4294967296}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}],"hitsAddend":null}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}],"limit":{"requestsPerUnit":2,"unit":"MINUTE"}}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}],"limit":{"requests_per_unit":2,"unit":"MINUTE"}}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}],"limit":{"requestsPerUnit":2,"unit":2}}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"other","value":"{s}"}],"limit":{"requestsPerUnit":1,"unit":"HOUR"}}]}`),
		j(`{"domain":"side","descriptors":[{"entries":[{"key":"other","value":"{s}"}],"limit":{"requestsPerUnit":1,"unit":"HOUR"}}]}`),
		j("{\"domain\":\"side\",\"descriptors\":[{\"entries\":[{\"key\":\"key2\",\"value\":\"\xff{s}\"}]}]}"),
		j("\ufeff{\"domain\":\"side\",\"descriptors\":[{\"entries\":[{\"key\":\"key2\",\"value\":\"{s}\"}]}]}"),
		j("{\"domain\":\"side\",\f\"descriptors\":[{\"entries\":[{\"key\":\"key2\",\"value\":\"{s}\"}]}]}"),
		j(`{bad`),
		j(`[]`),
		j(`null`),
		j(`""`),
		j(`{}`),
	}},
}

// TestProcessesAgree starts both services as processes under several
// settings and compares every case's answers over gRPC and /json.
func TestProcessesAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts both services")
	}
	for _, set := range []map[string]string{
		{},
		{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "RESPONSE_DYNAMIC_METADATA": "true"},
		{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"},
		{"SHADOW_MODE": "true"},
		{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"},
	} {
		t.Run(fmt.Sprint(set), func(t *testing.T) {
			p := startPair(t, set, processConfig)
			for _, c := range processCases {
				p.compare(t, c.name, c.seq)
			}
		})
	}
}

// TestProcessEndpointsAgree compares the other endpoints: /healthcheck,
// /json with other methods, unknown paths, and /rlconfig (its lines,
// which theirs writes in map order).
func TestProcessEndpointsAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts both services")
	}
	p := startPair(t, nil, processConfig)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/healthcheck", ""}, {"HEAD", "/healthcheck", ""}, {"POST", "/healthcheck", "x"},
		{"GET", "/json", ""}, {"PUT", "/json", `{"domain":"side","descriptors":[{"entries":[{"key":"day","value":"put"}]}]}`},
		{"GET", "/nope", ""}, {"GET", "/", ""},
	} {
		ta := doHTTP(t, c.method, p.theirs.http+c.path, c.body)
		oa := doHTTP(t, c.method, p.ours.http+c.path, c.body)
		// PUT /json is decided: compared as sameJSON compares, since
		// their build may space its JSON (a CI build did).
		if !sameJSON(ta, oa) {
			t.Errorf("%s %s:\ntheirs %+v\nours   %+v", c.method, c.path, ta, oa)
		}
	}
	for _, svc := range []string{"", "ratelimit", "other"} {
		tr, terr := healthpb.NewHealthClient(p.theirs.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		or, oerr := healthpb.NewHealthClient(p.ours.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if status.Code(terr) != status.Code(oerr) || !proto.Equal(tr, or) {
			t.Errorf("gRPC health %q:\ntheirs %v %v\nours   %v %v", svc, tr, terr, or, oerr)
		}
	}
	ta := doHTTP(t, "GET", p.theirs.dbg+"/rlconfig", "")
	oa := doHTTP(t, "GET", p.ours.dbg+"/rlconfig", "")
	lines := func(s string) []string {
		l := strings.Split(strings.TrimRight(s, "\n"), "\n")
		sort.Strings(l)
		return l
	}
	if ta.code != oa.code || ta.ctype != oa.ctype || !bytes.Equal([]byte(strings.Join(lines(ta.body), "\n")), []byte(strings.Join(lines(oa.body), "\n"))) {
		t.Errorf("/rlconfig:\ntheirs %+v\nours   %+v", ta, oa)
	}
}

// TestProcessesWithoutConfig compares both services started with no
// configuration file, and with one that does not load: both start, and
// answer every request with the same error.
func TestProcessesWithoutConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts both services")
	}
	for name, cfg := range map[string]string{"none": "", "broken": "domain: side\ndescriptors:\n  - key: [\n"} {
		t.Run(name, func(t *testing.T) {
			p := startPair(t, nil, cfg)
			p.compare(t, name, []action{
				g("side", 1, 1, "key2={s}"),
				j(`{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"{s}"}]}]}`),
			})
			ta := doHTTP(t, "GET", p.theirs.dbg+"/rlconfig", "")
			oa := doHTTP(t, "GET", p.ours.dbg+"/rlconfig", "")
			if ta != oa {
				t.Errorf("/rlconfig:\ntheirs %+v\nours   %+v", ta, oa)
			}
		})
	}
}

// TestProcessesRedisDown stops both redis-servers under running services:
// both answer gRPC with an error of code Unknown (the messages differ:
// each names its own client's error), /json with 400, and keep
// /healthcheck at 200 (theirs probes Redis only with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
func TestProcessesRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts both services")
	}
	p := startPair(t, map[string]string{"REDIS_TIMEOUT": "1s"}, processConfig)
	p.compare(t, "before", []action{g("side", 1, 1, "key2={s}")})
	p.theirRedis.Stop()
	p.ourRedis.Stop()
	req := request(step{"side", 1, []string{"key2=down"}, 1})
	_, terr := p.theirs.rls.ShouldRateLimit(context.Background(), req)
	_, oerr := p.ours.rls.ShouldRateLimit(context.Background(), req)
	if terr == nil || status.Code(terr) != status.Code(oerr) {
		t.Errorf("gRPC with Redis down: theirs %v, ours %v", terr, oerr)
	}
	body := `{"domain":"side","descriptors":[{"entries":[{"key":"key2","value":"down"}]}]}`
	for _, c := range []struct{ method, path, body string }{{"POST", "/json", body}, {"GET", "/healthcheck", ""}} {
		ta := doHTTP(t, c.method, p.theirs.http+c.path, c.body)
		oa := doHTTP(t, c.method, p.ours.http+c.path, c.body)
		if !sameJSON(ta, oa) {
			t.Errorf("%s %s with Redis down:\ntheirs %+v\nours   %+v", c.method, c.path, ta, oa)
		}
	}
}

// TestProcessesActiveHealthCheck: with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true, both services turn
// /healthcheck to 500 once their Redis is gone (theirs when its last
// connection closes, ours at its next probe); ours ignored the setting and
// stayed 200.
func TestProcessesActiveHealthCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts both services")
	}
	p := startPair(t, map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true", "REDIS_TIMEOUT": "1s"}, processConfig)
	p.compare(t, "before", []action{g("side", 1, 1, "key2={s}")})
	for _, side := range []string{p.theirs.http, p.ours.http} {
		if a := doHTTP(t, "GET", side+"/healthcheck", ""); a.code != 200 {
			t.Fatalf("%s/healthcheck before: %+v", side, a)
		}
	}
	p.theirRedis.Stop()
	p.ourRedis.Stop()
	req := request(step{"side", 1, []string{"key2=down"}, 1})
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A request makes theirs notice the closed connections (it
		// waits for Redis with no bound of its own: the deadline ends it).
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = p.theirs.rls.ShouldRateLimit(ctx, req)
		cancel()
		ta := doHTTP(t, "GET", p.theirs.http+"/healthcheck", "")
		oa := doHTTP(t, "GET", p.ours.http+"/healthcheck", "")
		if ta.code == 500 && oa.code == 500 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthcheck with Redis gone: theirs %d, ours %d; want 500 from both", ta.code, oa.code)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
