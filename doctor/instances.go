package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

// The metric names doctor reads from an instance's /metrics (package
// metrics, server and config export them).
const (
	metricAllowed      = "rate_limit_allowed_total"
	metricDenied       = "rate_limit_denied_total"
	metricFallback     = "rate_limit_fallback_total"
	metricBreaker      = "rate_limit_breaker_state"
	metricSkew         = "rate_limit_clock_skew_seconds"
	metricSyncRTT      = "rate_limit_clock_sync_rtt_seconds"
	metricShadowDenied = "rate_limit_shadow_denied_total"
	// metricInstancesLive is the fleet's count at an instance's last
	// beat (package fleet); metricFallbackInstances what its local
	// fallback divides each limit by (serve).
	metricInstancesLive     = "floodgate_instances_live"
	metricFallbackInstances = "floodgate_fallback_instances"
)

// maxBody caps what doctor reads from one HTTP answer.
const maxBody = 16 << 20

// instance is what doctor read from one `floodgate serve` instance.
type instance struct {
	url           string
	readyStatus   int
	ready         string // "ready", "degraded", "draining"
	readyErr      string
	configVersion string
	configSource  string     // where the instance read its configuration: a file, or redis:<prefix>:config
	configHash    string     // the SHA-256 of its document; "" from builds whose /readyz does not say
	store         string     // "memory" or "redis" from /readyz; "" from builds that do not say
	heartbeatID   string     // its member of <prefix>:instances from /readyz; "" from builds that do not say
	date          dateSample // the Date header of /readyz; zero when none was read
	metrics       map[string]*dto.MetricFamily
	metricsAt     time.Time
	later         map[string]*dto.MetricFamily // a second scrape, for rates
	laterAt       time.Time
	err           error
	// sentinels is /readyz's sentinels block (serve behind Sentinel),
	// nil when it has none.
	sentinels *readySentinels
	// metricsURL is the base URL /metrics was read from: url, or the
	// instance's admin address given as another --instance (serve
	// --metrics-admin-only), empty when none was read.
	metricsURL string
	// metrics404 is set when url answered /metrics with 404 (serve
	// --metrics-admin-only serves it on --admin-addr only; a probes'
	// address, --health-addr, serves none).
	metrics404 bool
	// probes is set when url is an instance's probes' address (serve
	// --health-addr): its /readyz is the instance's, but it serves no
	// /metrics, whatever --metrics-admin-only.
	probes bool
	// notFloodgate says why url's /readyz is not a Floodgate instance's
	// answer (an admin address, another service); empty when it is. Its
	// readiness and configuration version are then unknown.
	notFloodgate string
	// admin is set when url is an admin address: /readyz is not
	// Floodgate's, /metrics has Floodgate's series.
	admin bool
	// envoy is set when url is a port of floodgate envoy-compat (its HTTP
	// or debug port), not of serve: nothing of it is judged.
	envoy bool
	// tlsFix is the fix of an instance doctor could not read for a TLS
	// reason (tlsFailure): nothing was read; "" for any other.
	tlsFix string
}

// readySentinels is what an instance's /readyz says of its sentinels
// (serve behind Sentinel): information, which never makes it unready, so
// an instance whose sentinels do not monitor the master, or do not
// answer, is still "ready" (a review saw "[PASS] ready: 1 instance
// ready" while its /readyz warned that the sentinels forgot the
// primary).
type readySentinels struct {
	Configured    int    `json:"configured"`
	Answering     int    `json:"answering"`
	Majority      bool   `json:"majority"`
	UnknownMaster bool   `json:"unknown_master"`
	Warning       string `json:"warning"`
	NotAskedYet   bool   `json:"not_asked_yet"`
}

// sentinelsWarning returns the evidence line of in's /readyz sentinels
// warning, "" when it has none.
func (in *instance) sentinelsWarning() string {
	if in.sentinels == nil || in.sentinels.Warning == "" {
		return ""
	}
	return fmt.Sprintf("%s: its sentinels (%d of %d answering): %s", in.url, in.sentinels.Answering, in.sentinels.Configured, in.sentinels.Warning)
}

// noMetricsWhy says why the instance's url serves no /metrics (when
// metrics404 is set): a probes' address, or --metrics-admin-only.
func (in *instance) noMetricsWhy() string {
	if in.probes {
		return "a probes' address, --health-addr"
	}
	return "--metrics-admin-only"
}

// metricsAdminOnlyHint says how doctor reads the metrics of an instance
// run with --metrics-admin-only.
const metricsAdminOnlyHint = "an instance run with --metrics-admin-only serves /metrics on its --admin-addr only: give that address too, as another --instance (same host), and doctor reads /metrics there"

// metricsFix is the fix of a check that could not read some /metrics.
const metricsFix = "give doctor each instance's main address (--addr), which serves /readyz; for instances run with --metrics-admin-only, give their admin address (--admin-addr) too, as another --instance on the same host: doctor reads /metrics there"

func (r *run) get(ctx context.Context, url string) ([]byte, http.Header, int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	t0 := time.Now()
	resp, err := r.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err == nil && len(body) > maxBody {
		// Cut at the cap, the answer would not parse, and its parser's
		// error ("unexpected end of JSON input") would hide why.
		return nil, resp.Header, resp.StatusCode, time.Since(t0), fmt.Errorf("%w: GET %s answered more than %d MiB", errTooLarge, url, maxBody>>20)
	}
	return body, resp.Header, resp.StatusCode, time.Since(t0), err
}

// errTooLarge is the error of an HTTP answer over doctor's cap (maxBody).
var errTooLarge = errors.New("answer over doctor's cap, not read")

// versionUnknownFix is the fix of instance URLs that did not answer
// /readyz as Floodgate.
func versionUnknownFix(ins []*instance) string {
	f := "give each instance's main address (serve --addr), which serves /readyz and its configuration version"
	if countEnvoy(ins) > 0 {
		f += "; " + envoyFix
	}
	return f
}

// countEnvoy counts the envoy-compat ports among ins.
func countEnvoy(ins []*instance) int {
	n := 0
	for _, in := range ins {
		if in.envoy {
			n++
		}
	}
	return n
}

// unreadFix is the fix of a check that could not read the /metrics of
// some of ins: an instance doctor could not read for a TLS reason gets
// its TLS fix (tlsFixes); one that did not answer at all (connection
// refused, a timeout) is down or unreachable, not given by the wrong
// address; the address advice is for the others.
func unreadFix(ins []*instance) string {
	var down, probes []string
	other := false
	if n := notRead(ins); n > 0 {
		return deadlineFix
	}
	for _, in := range ins {
		switch {
		case in.metrics != nil:
		case in.tlsFix != "":
		case in.probes:
			probes = append(probes, in.url)
		case in.envoy:
		case in.readyStatus == 0 && in.notFloodgate == "":
			down = append(down, in.url)
		default:
			other = true
		}
	}
	fixes := tlsFixes(ins)
	if n := countEnvoy(ins); n > 0 {
		fixes = append(fixes, envoyFix)
	}
	if len(down) > 0 {
		fixes = append(fixes, fmt.Sprintf("%s did not answer at all (%s): check that %s up and reachable from this host", strings.Join(down, ", "),
			"connection refused or timed out", plural.Word(len(down), "it is", "they are")))
	}
	if len(probes) > 0 {
		fixes = append(fixes, fmt.Sprintf("%s %s probes' address (serve --health-addr), which serves no /metrics: for each, %s", strings.Join(probes, ", "),
			plural.Word(len(probes), "is an instance's", "are instances'"), probesFix))
	}
	switch {
	case len(fixes) == 0:
		return metricsFix
	case other:
		fixes = append(fixes, "for the others: "+metricsFix)
	}
	return strings.Join(fixes, "; ")
}

// tlsFixes returns the TLS fixes of ins (their tlsFix), each once, after
// the URLs it is for, in the order of ins.
func tlsFixes(ins []*instance) []string {
	urls := map[string][]string{}
	var order []string
	for _, in := range ins {
		if in.tlsFix == "" {
			continue
		}
		if urls[in.tlsFix] == nil {
			order = append(order, in.tlsFix)
		}
		urls[in.tlsFix] = append(urls[in.tlsFix], in.url)
	}
	out := make([]string, 0, len(order))
	for _, f := range order {
		out = append(out, strings.Join(urls[f], ", ")+": "+f)
	}
	return out
}

// httpsAnswer is the start of the body net/http answers, with status 400,
// to a plain HTTP request on a TLS listener (serve --tls-cert-file).
const httpsAnswer = "Client sent an HTTP request to an HTTPS server"

// tlsFailure returns the fix of an instance URL u that doctor could not
// read for a TLS reason: err, the error of its request, is a certificate
// doctor refused or a TLS alert about doctor's client certificate, or the
// scheme is the wrong one (plain HTTP to a TLS listener, which fasthttp
// closes without an answer, or TLS to a plain one). It returns "" for any
// other error: the instance did not answer.
func tlsFailure(u string, err error) string {
	var unknown x509.UnknownAuthorityError
	var verr *tls.CertificateVerificationError
	msg := err.Error()
	plain := strings.HasPrefix(u, "http://")
	switch {
	case errors.As(err, &unknown):
		return "its certificate is signed by an authority doctor does not trust: give doctor the CA that signed the instance's certificate (--tls-ca-file)"
	case errors.As(err, &verr):
		return "doctor refused its certificate (see the error): give doctor the CA that signed it (--tls-ca-file), and the instance's URL with a name or IP address its certificate carries"
	case clientCertAlert(err) == "certificate required":
		return "the instance requires a client certificate (serve --tls-client-ca-file), and doctor presented none: give doctor one that the instance's --tls-client-ca-file trusts (--tls-cert-file, --tls-key-file)"
	case clientCertAlert(err) != "":
		return "the instance refused doctor's client certificate: give doctor one that the instance's --tls-client-ca-file trusts (--tls-cert-file, --tls-key-file)"
	case plain && (errors.Is(err, io.EOF) || strings.Contains(msg, "EOF") || strings.Contains(msg, "server closed the connection") ||
		strings.Contains(msg, "connection reset")):
		return "the instance closed the connection without an answer, as a TLS listener does to plain HTTP (serve --tls-cert-file with --http-server fasthttp): if it serves TLS, give its URL as https:// (with --tls-ca-file, and --tls-cert-file, --tls-key-file when it requires client certificates)"
	case !plain && (strings.Contains(msg, "server gave HTTP response to HTTPS client") ||
		strings.Contains(msg, "first record does not look like a TLS handshake")):
		return "the instance does not serve TLS: give its URL as http://"
	}
	return ""
}

// httpsFix is the fix of an http:// URL that net/http answered with
// httpsAnswer.
const httpsFix = "the instance serves TLS (serve --tls-cert-file): give its URL as https:// (with --tls-ca-file, and --tls-cert-file, --tls-key-file when it requires client certificates)"

// errMetrics404 is the error of a /metrics answered 404.
var errMetrics404 = errors.New("status 404 (" + metricsAdminOnlyHint + ")")

// probesFix is the fix for a probes' address given as an instance.
const probesFix = "give the instance's main address (--addr) instead, which serves /readyz and /metrics (and its --admin-addr too when it runs with --metrics-admin-only)"

// errProbes is the error of a /metrics answered 404 by a probes' address
// (serve --health-addr), which a walk was told to fix by giving the admin
// address of an instance that had no --metrics-admin-only.
var errProbes = errors.New("status 404: this is the instance's probes' address (serve --health-addr), which serves only /healthz and /readyz: " + probesFix)

// probesAnswer is in the 404 of a probes' address to any other path.
const probesAnswer = "on the health listener (floodgate serve --health-addr)"

func (r *run) scrape(ctx context.Context, base string) (map[string]*dto.MetricFamily, error) {
	body, _, code, _, err := r.get(ctx, base+"/metrics")
	if err != nil {
		return nil, err
	}
	if code == http.StatusNotFound {
		if strings.Contains(string(body), probesAnswer) {
			return nil, errProbes
		}
		return nil, errMetrics404
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("status %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(string(body)))
}

// errNotRead marks an instance doctor did not read because the run's own
// time ran out (--timeout): a re-walk saw such instances reported down,
// with the advice to check that they were up, while they were serving.
var errNotRead = errors.New("not read: doctor's time ran out (--timeout) before it was; see Run/deadline")

// runOver returns err, or errNotRead when the run's context is over.
func runOver(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errNotRead
	}
	return err
}

// notRead counts the instances doctor's time ran out before reading.
func notRead(ins []*instance) int {
	n := 0
	for _, in := range ins {
		if errors.Is(in.err, errNotRead) {
			n++
		}
	}
	return n
}

// readInstances reads /readyz and /metrics of every instance, then
// /metrics again after RateWindow, so that rates can be computed.
func (r *run) readInstances(ctx context.Context) []*instance {
	if r.instances != nil || len(r.opts.Instances) == 0 {
		return r.instances
	}
	for _, u := range r.opts.Instances {
		r.instances = append(r.instances, &instance{url: strings.TrimRight(u, "/")})
	}
	// Read at once, at most instanceReaders at a time (an instance that
	// never answers holds its reader for the HTTP client's timeout, 5s);
	// the list keeps the order given.
	each(r.instances, func(in *instance) { r.readInstance(ctx, in) })
	r.instances = pairAdmins(r.instances)
	if r.opts.RateWindow > 0 {
		select {
		case <-ctx.Done():
			return r.instances
		case <-time.After(r.opts.RateWindow):
		}
		each(r.instances, func(in *instance) {
			if in.metrics == nil {
				return
			}
			if m, err := r.scrape(ctx, in.metricsURL); err == nil {
				in.later, in.laterAt = m, time.Now()
			}
		})
	}
	return r.instances
}

// instanceReaders is the most instances read at once.
const instanceReaders = 8

// each runs fn on every instance of ins, instanceReaders at a time, and
// returns when all are done.
func each(ins []*instance, fn func(*instance)) {
	sem := make(chan struct{}, instanceReaders)
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(in)
		}()
	}
	wg.Wait()
}

// readInstance reads /readyz and /metrics of one instance.
func (r *run) readInstance(ctx context.Context, in *instance) {
	{
		local := r.opts.Now()
		body, hdr, code, rtt, err := r.get(ctx, in.url+"/readyz")
		if err != nil {
			in.err = runOver(ctx, err)
			if in.err == err {
				in.tlsFix = tlsFailure(in.url, err)
			}
			return
		}
		if code == http.StatusBadRequest && strings.HasPrefix(in.url, "http://") && strings.HasPrefix(string(body), httpsAnswer) {
			// Plain HTTP to a TLS listener: nothing of the instance read
			// (a re-walk was told to give the instance's main address).
			in.err = fmt.Errorf("GET /readyz answered HTTP %d %q", code, strings.TrimSpace(string(body)))
			in.tlsFix = httpsFix
			return
		}
		in.readyStatus = code
		var ready struct {
			Status        *string         `json:"status"`
			Error         string          `json:"error"`
			ConfigVersion *string         `json:"config_version"`
			ConfigSource  string          `json:"config_source"`
			ConfigHash    string          `json:"config_hash"`
			Store         string          `json:"store"`
			HeartbeatID   string          `json:"heartbeat_id"`
			Sentinels     *readySentinels `json:"sentinels"`
		}
		jerr := json.Unmarshal(body, &ready)
		if jerr != nil || ready.Status == nil || ready.ConfigVersion == nil || (code != http.StatusOK && code != http.StatusServiceUnavailable) {
			// Not Floodgate's /readyz: an admin address (no /readyz there:
			// a 404 problem, which is JSON too), or another service.
			// /metrics tells an admin address.
			// envoy-compat's ports are told apart too: its debug port by
			// its floodgate_envoy_* series, its HTTP port by /healthcheck.
			// Neither is an instance doctor can audit (a walk saw its
			// debug port taken for an admin address, and fallback and
			// denials pass on its zero counts).
			m, merr := r.scrape(ctx, in.url)
			switch {
			case merr == nil && hasEnvoySeries(m):
				in.envoy = true
				in.notFloodgate = fmt.Sprintf("GET /readyz answered HTTP %d, and /metrics has floodgate_envoy_* series: this is floodgate envoy-compat's debug port, not a floodgate serve instance", code)
				in.err = errors.New(in.notFloodgate)
			case merr == nil && hasFloodgateSeries(m):
				in.admin = true
				in.metrics, in.metricsAt, in.metricsURL = m, time.Now(), in.url
				in.notFloodgate = fmt.Sprintf("GET /readyz answered HTTP %d, but /metrics has Floodgate's series: this is an instance's admin address (--admin-addr), which serves no /readyz", code)
			case r.envoyHealthcheck(ctx, in.url):
				in.envoy = true
				in.notFloodgate = fmt.Sprintf("GET /readyz answered HTTP %d, and /healthcheck answered OK: this is floodgate envoy-compat's HTTP port, not a floodgate serve instance", code)
				in.err = errors.New(in.notFloodgate)
			default:
				in.notFloodgate = fmt.Sprintf("GET /readyz answered HTTP %d%s: this URL did not answer as a Floodgate instance", code, bodyHint(code, body))
				in.err = errors.New(in.notFloodgate)
			}
			return
		}
		in.ready, in.readyErr, in.configVersion, in.store = *ready.Status, ready.Error, *ready.ConfigVersion, ready.Store
		in.configSource, in.configHash, in.heartbeatID = ready.ConfigSource, ready.ConfigHash, ready.HeartbeatID
		in.sentinels = ready.Sentinels
		if d, err := http.ParseTime(hdr.Get("Date")); err == nil {
			in.date = dateSample{date: d, sent: local, rtt: rtt}
		}
		in.metrics, err = r.scrape(ctx, in.url)
		in.metricsAt = time.Now()
		if err != nil {
			in.probes = errors.Is(err, errProbes)
			in.metrics404 = in.probes || errors.Is(err, errMetrics404)
			in.err = runOver(ctx, fmt.Errorf("GET /metrics: %v", err))
		} else {
			in.metricsURL = in.url
		}
	}
}

// bodyHint says, for an answer to /readyz that is not Floodgate's, what
// the URL probably is.
func bodyHint(code int, body []byte) string {
	if code == http.StatusNotFound {
		return " (no /readyz there: is this an admin address, --admin-addr? give the instance's main --addr)"
	}
	if len(body) == 0 {
		return ", with an empty body"
	}
	return ""
}

// envoyFix says what doctor can audit of floodgate envoy-compat, whose
// ports were given as instances.
const envoyFix = "doctor's instance checks are for floodgate serve (its /readyz and /metrics), which envoy-compat does not serve: run doctor on envoy-compat's Redis without --instance for the Redis checks (version, eviction policy, memory, persistence, replication, latency; its counters are not under a Floodgate prefix, so the key checks do not apply), and watch envoy-compat itself by its HTTP port's /healthcheck and its debug port's /metrics (floodgate_envoy_* series; see docs/envoy.md)"

// hasEnvoySeries reports whether a /metrics answer has floodgate
// envoy-compat's series, which serve does not export.
func hasEnvoySeries(m map[string]*dto.MetricFamily) bool {
	for name := range m {
		if strings.HasPrefix(name, "floodgate_envoy_") {
			return true
		}
	}
	return false
}

// envoyHealthcheck reports whether base answers GET /healthcheck 200 "OK",
// as envoy-compat's HTTP port does.
func (r *run) envoyHealthcheck(ctx context.Context, base string) bool {
	body, _, code, _, err := r.get(ctx, base+"/healthcheck")
	return err == nil && code == http.StatusOK && strings.TrimSpace(string(body)) == "OK"
}

// hasFloodgateSeries reports whether a /metrics answer has any of
// Floodgate's metric families.
func hasFloodgateSeries(m map[string]*dto.MetricFamily) bool {
	for name := range m {
		if strings.HasPrefix(name, "rate_limit_") || strings.HasPrefix(name, "floodgate_") {
			return true
		}
	}
	return false
}

// pairAdmins joins each instance whose /metrics is on its admin address
// only (serve --metrics-admin-only: its main URL answered /metrics 404)
// with that admin address, when it was given as another --instance: the
// one admin address on the same host, with one such instance there. The
// joined instance reads /metrics from the admin address, which leaves the
// list. Other admin addresses stay, unpaired: their metrics are read, their
// readiness and configuration version are unknown.
func pairAdmins(ins []*instance) []*instance {
	host := func(u string) string {
		pu, err := url.Parse(u)
		if err != nil {
			return u
		}
		return pu.Hostname()
	}
	mains, admins := map[string][]*instance{}, map[string][]*instance{}
	for _, in := range ins {
		switch {
		case in.admin:
			admins[host(in.url)] = append(admins[host(in.url)], in)
		case in.metrics404:
			mains[host(in.url)] = append(mains[host(in.url)], in)
		}
	}
	joined := map[*instance]bool{}
	for h, ms := range mains {
		as := admins[h]
		if len(ms) != 1 || len(as) != 1 {
			continue
		}
		m, a := ms[0], as[0]
		m.metrics, m.metricsAt, m.metricsURL = a.metrics, a.metricsAt, a.url
		m.metrics404, m.err = false, nil
		joined[a] = true
	}
	out := ins[:0]
	for _, in := range ins {
		if !joined[in] {
			out = append(out, in)
		}
	}
	return out
}

// sum adds up the values of every series of a counter or gauge family,
// keeping those whose labels match keep (nil keeps all); ok is false when
// the family is absent.
func sum(mf map[string]*dto.MetricFamily, name string, keep func(map[string]string) bool) (float64, bool) {
	f, ok := mf[name]
	if !ok {
		return 0, false
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		if keep != nil && !keep(labels(m)) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total, true
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// metricsUnread returns the evidence line of an instance whose /metrics
// could not be read (unreachable, or /metrics refused), and false when
// they were read.
func metricsUnread(in *instance) (string, bool) {
	switch {
	case in.metrics != nil:
		return "", false
	case errors.Is(in.err, errNotRead):
		return fmt.Sprintf("%s: %v", in.url, in.err), true
	case in.tlsFix != "":
		return fmt.Sprintf("%s: nothing read: %v", in.url, in.err), true
	case in.readyStatus == 0:
		return fmt.Sprintf("%s: unreachable, nothing read: %v", in.url, in.err), true
	case in.err != nil:
		return fmt.Sprintf("%s: %v", in.url, in.err), true
	}
	return fmt.Sprintf("%s: /metrics not read", in.url), true
}

// noConfigurationFix is the fix of an instance with no configuration.
const noConfigurationFix = "push a valid configuration document (floodgate config push FILE) under the instances' --prefix: an instance started with --config-from-redis applies the first valid one it reads; its /readyz error says why it has none (the key missing, Redis unreachable, a document refused)"

// noConfiguration reports an instance that runs with no configuration
// (serve --config-from-redis started without a usable document): its
// /readyz says "no-configuration", and its HTTP API answers every
// decision 503.
func (in *instance) noConfiguration() bool {
	return in.notFloodgate == "" && in.ready == "no-configuration"
}

// sentinelsWarnedSummary says that warned of n instances have a
// sentinels warning in their /readyz, unknown of them that a majority of
// their sentinels do not monitor the master.
func sentinelsWarnedSummary(warned, unknown, n int) string {
	var parts []string
	if unknown > 0 {
		parts = append(parts, fmt.Sprintf("%d of %s %s a majority of %s sentinels not monitoring the master (/readyz unknown_master): the primary is forgotten by them, and a failed primary would not be replaced (see Redis/sentinel)",
			unknown, plural.Count(n, "instance", "instances"), plural.Word(unknown, "finds", "find"), plural.Word(unknown, "its", "their")))
	}
	if other := warned - unknown; other > 0 {
		parts = append(parts, fmt.Sprintf("%d of %s %s a sentinels warning in /readyz (no majority of the sentinels answers, or they were not asked yet): a failover would not be followed (see Redis/sentinel)",
			other, plural.Count(n, "instance", "instances"), plural.Word(other, "has", "have")))
	}
	return strings.Join(parts, "; ")
}

// sentinelsWarnedFix is the fix of warned instances whose /readyz
// carries a sentinels warning, unknown of them that the sentinels do not
// monitor the master.
func sentinelsWarnedFix(warned, unknown int) string {
	var fixes []string
	if unknown > 0 {
		fixes = append(fixes, "check the instances' --redis-master against SENTINEL MASTERS on each sentinel, or SENTINEL MONITOR the master again on those that forgot it (Redis/sentinel names them); the warning ends once a majority monitors it again")
	}
	if warned > unknown {
		fixes = append(fixes, "see Redis/sentinel, which names the sentinels that do not answer, do not monitor the master or refuse doctor; the instances' log (no majority of the sentinels answered) names what each sentinel answered them: a NOAUTH or WRONGPASS there means the instances need the sentinels' password (--redis-sentinel-password-file); run doctor again if an instance had only just started (not_asked_yet)")
	}
	return strings.Join(fixes, "; ")
}

// notExported is the evidence line of a metric an instance does not have.
func notExported(url, name string) string {
	return fmt.Sprintf("%s: %s not exported by this version", url, name)
}

func (r *run) instanceChecks(ctx context.Context) {
	if len(r.opts.Instances) == 0 {
		r.check(GroupInstances, "instances", func(c *Check) {
			c.Status, c.Summary, c.Read = Info, "no instance URLs given (--instance): skipped", "nothing"
		})
		return
	}
	ins := r.readInstances(ctx)
	read := "GET /readyz and /metrics of " + plural.Count(len(ins), "instance", "instances")
	r.check(GroupInstances, "ready", func(c *Check) {
		c.Read = read
		bad, foreign, admins, memory, tlsBad, noConf := 0, 0, 0, 0, 0, 0
		// The instances whose /readyz carries a sentinels warning, and
		// those of them whose sentinels do not monitor the master.
		var sentinelWarned, sentinelUnknown int
		var sentinelLines []string
		for _, in := range ins {
			if w := in.sentinelsWarning(); w != "" {
				sentinelLines = append(sentinelLines, w)
				sentinelWarned++
				if in.sentinels.UnknownMaster {
					sentinelUnknown++
				}
			}
			switch {
			case in.tlsFix != "":
				tlsBad++
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: not read: %v", in.url, in.err))
			case in.store == "memory":
				// Ready, but deciding on its own: its limits are not the
				// deployment's, shared through this Redis.
				memory++
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: runs in memory (serve without --redis): it decides alone, not through this Redis", in.url))
			case errors.Is(in.err, errNotRead):
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: %v", in.url, in.err))
			case in.err != nil && in.readyStatus == 0:
				bad++
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: unreachable: %v", in.url, in.err))
			case in.notFloodgate != "":
				foreign++
				if in.admin {
					admins++
				}
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: %s", in.url, in.notFloodgate))
			case in.readyStatus != http.StatusOK:
				bad++
				if in.noConfiguration() {
					noConf++
				}
				line := fmt.Sprintf("%s: %s (HTTP %d)", in.url, in.ready, in.readyStatus)
				if in.readyErr != "" {
					// A Cluster's error spans lines: keep the report's layout.
					line += ": " + strings.Join(strings.Fields(strings.ReplaceAll(in.readyErr, "\n", "; ")), " ")
				}
				c.Evidence = append(c.Evidence, line)
			default:
				line := fmt.Sprintf("%s: ready, config version %q", in.url, in.configVersion)
				if in.metricsURL != "" && in.metricsURL != in.url {
					line += "; /metrics read on its admin address " + in.metricsURL
				}
				c.Evidence = append(c.Evidence, line)
			}
		}
		c.Evidence = append(c.Evidence, sentinelLines...)
		if bad > 0 || foreign > 0 || memory > 0 || tlsBad > 0 {
			var parts []string
			if tlsBad > 0 {
				parts = append(parts, fmt.Sprintf("%d of %s not read (TLS failed, or the URL's scheme is not the instance's), so %s readiness is unknown", tlsBad,
					plural.Count(len(ins), "instance", "instances"), plural.Word(tlsBad, "its", "their")))
			}
			if memory > 0 {
				parts = append(parts, fmt.Sprintf("%d of %s in memory, not on Redis: each admits its own limit", memory, plural.Count(len(ins), "instance runs", "instances run")))
			}
			if bad > 0 {
				parts = append(parts, fmt.Sprintf("%d of %s", bad, plural.Count(len(ins), "instance not ready", "instances not ready")))
			}
			if foreign > 0 {
				parts = append(parts, fmt.Sprintf("%d of %s not answer /readyz as a Floodgate instance, so %s readiness is unknown", foreign, plural.Count(len(ins), "URL does", "URLs do"), plural.Word(foreign, "its", "their")))
			}
			if sentinelWarned > 0 {
				parts = append(parts, sentinelsWarnedSummary(sentinelWarned, sentinelUnknown, len(ins)))
			}
			c.Status, c.Summary = Fail, strings.Join(parts, "; ")
			fixes := tlsFixes(ins)
			if sentinelWarned > 0 {
				fixes = append(fixes, sentinelsWarnedFix(sentinelWarned, sentinelUnknown))
			}
			if memory > 0 {
				fixes = append(fixes, "start every instance with the deployment's --redis (or check that doctor was given the right instances)")
			}
			if bad > 0 {
				f := "read the instance's log and /readyz error: a degraded instance cannot reach Redis or is refused by it (NOPERM: its ACL user lacks a grant, see docs/operations.md), a draining one is shutting down"
				if noConf > 0 {
					f += ", one with no-configuration has no usable configuration document (see Instances/config-version): push one (floodgate config push FILE)"
				}
				fixes = append(fixes, f)
			}
			if envoys := countEnvoy(ins); envoys > 0 {
				fixes = append(fixes, envoyFix)
			}
			if foreign > countEnvoy(ins) {
				f := "give each instance's main address (serve --addr), which serves /readyz"
				if admins > 0 {
					f += "; an admin address (--admin-addr) serves only /metrics and the admin API: with --metrics-admin-only, give it as well as the main address (same host), and doctor reads /metrics there"
				}
				fixes = append(fixes, f)
			}
			c.Fix = strings.Join(fixes, "; ")
			return
		}
		if n := notRead(ins); n > 0 {
			c.Status, c.Fix = Warn, deadlineFix
			c.Summary = fmt.Sprintf("%d of %s: doctor's time ran out first, so %s readiness is unknown", n, plural.Count(len(ins), "instance not read", "instances not read"), plural.Word(n, "its", "their"))
			return
		}
		c.Status, c.Summary = Pass, plural.Word(len(ins), "", "all ")+plural.Count(len(ins), "instance ready", "instances ready")
		if sentinelWarned > 0 {
			// Ready, as /readyz says, but its sentinels block warns:
			// doctor says so rather than pass.
			c.Status = Warn
			c.Summary += ", but " + sentinelsWarnedSummary(sentinelWarned, sentinelUnknown, len(ins))
			c.Fix = sentinelsWarnedFix(sentinelWarned, sentinelUnknown)
		}
	})
	r.check(GroupInstances, "config-version", func(c *Check) {
		c.Read = read + " (no extra request)"
		versions := map[string][]string{}
		var unknown []string   // instances whose version is unknown: not a Floodgate /readyz
		var noConf []string    // instances with no configuration at all
		var unread []*instance // instances not read at all (no answer, TLS, the run's time over)
		for _, in := range ins {
			switch {
			case in.notFloodgate != "":
				unknown = append(unknown, in.url)
			case in.readyStatus == 0:
				unread = append(unread, in)
			case in.noConfiguration():
				noConf = append(noConf, in.url)
				line := in.url + ": no configuration (/readyz no-configuration)"
				if in.readyErr != "" {
					line += ": " + in.readyErr
				}
				c.Evidence = append(c.Evidence, line)
			case in.readyStatus != 0:
				versions[in.configVersion] = append(versions[in.configVersion], in.url)
			}
		}
		var vs []string
		for v, urls := range versions {
			vs = append(vs, v)
			c.Evidence = append(c.Evidence, fmt.Sprintf("version %q: %s", v, strings.Join(urls, ", ")))
		}
		sort.Strings(c.Evidence)
		if len(unknown) > 0 {
			c.Evidence = append(c.Evidence, "version unknown (no Floodgate /readyz answer): "+strings.Join(unknown, ", "))
		}
		defer func() {
			// Runs last: an instance with no configuration fails the
			// check whatever the others run.
			if len(noConf) == 0 {
				return
			}
			others, othersFix := c.Summary, c.Fix
			c.Status = Fail
			c.Summary = fmt.Sprintf("%d of %s no configuration (version \"\", /readyz no-configuration): %s every HTTP decision 503 problem no-configuration",
				len(noConf), plural.Count(len(ins), "instance has", "instances have"), plural.Word(len(noConf), "it answers", "they answer"))
			c.Fix = noConfigurationFix
			if len(versions) > 0 || len(unknown) > 0 {
				c.Summary += "; the others: " + strings.Replace(others, "every instance runs", "each runs", 1)
				if othersFix != "" {
					c.Fix += "; " + othersFix
				}
			}
		}()
		defer func() {
			// Runs after the one below: an instance not read at all
			// (one that accepts connections and never answers) was
			// left out, and the check passed on the others.
			if len(unread) == 0 || len(versions) == 0 {
				return
			}
			var urls []string
			for _, in := range unread {
				urls = append(urls, in.url)
			}
			c.Evidence = append(c.Evidence, "version unknown (not read, see ready): "+strings.Join(urls, ", "))
			c.Summary += fmt.Sprintf("; the version of %s is unknown: %s not read (see ready)", plural.Count(len(unread), "instance", "instances"), plural.Word(len(unread), "it was", "they were"))
			if c.Status == Pass {
				c.Status = Warn
				c.Fix = unreadFix(unread)
			}
		}()
		defer func() {
			if len(unknown) == 0 || len(versions) == 0 {
				return
			}
			// The verdict above is about the instances whose version is
			// known; say that the others' is not.
			c.Summary += fmt.Sprintf("; the version of %s is unknown (%s did not answer /readyz as a Floodgate instance)", plural.Count(len(unknown), "URL", "URLs"), plural.Word(len(unknown), "it", "they"))
			if c.Status == Pass {
				c.Status = Warn
				c.Fix = versionUnknownFix(ins)
			}
		}()
		if diff := differentContents(ins); len(diff) > 0 {
			c.Evidence = append(c.Evidence, diff...)
			c.Status = Fail
			c.Summary = "instances run different configurations under one version: the same request gets different limits depending on the instance"
			c.Fix = "give every change a new version and publish one configuration to all (floodgate config push with --config-from-redis, or the same file everywhere)"
			return
		}
		switch {
		case len(versions) > 1:
			sort.Strings(vs)
			c.Status = Fail
			c.Summary = fmt.Sprintf("instances run %d different configuration versions (%s): the same request gets different limits depending on the instance", len(versions), strings.Join(vs, ", "))
			c.Fix = "publish one configuration to all (floodgate config push with --config-from-redis, or the same file everywhere) and check for instances that rejected it (floodgate_config_reload_total{result=\"invalid\"})"
		case len(versions) == 1 && r.cfg != nil && vs[0] != r.cfg.Version():
			c.Status = Warn
			c.Summary = fmt.Sprintf("instances run version %q, but %s holds version %q", vs[0], r.cfgSource, r.cfg.Version())
			c.Fix = "the instances have not applied the current document (rejected, or not watching it): check their logs"
		case len(versions) == 1 && r.cfg != nil && sameHash(ins) != "" && sameHash(ins) != r.cfg.Hash() && r.runSigned(ctx, c, sameHash(ins)):
			c.Status = Pass
			c.Summary = fmt.Sprintf("every instance runs configuration version %q: the file %s, signed (config push --sign-key-file: their hash %s covers the signature line of %s:config)",
				vs[0], r.opts.ConfigFile, short(sameHash(ins)), r.opts.Prefix)
		case len(versions) == 1 && r.cfg != nil && sameHash(ins) != "" && sameHash(ins) != r.cfg.Hash():
			c.Status = Warn
			c.Summary = fmt.Sprintf("instances run version %q, but not the document %s holds under that version (hash %s, theirs %s)", vs[0], r.cfgSource, short(r.cfg.Hash()), short(sameHash(ins)))
			c.Fix = "give every change a new version; check that doctor was given the instances' configuration (--config FILE, or the one in Redis)"
			if r.opts.ConfigFile == "" {
				c.Fix = "if the stored document differs from the file the instances run only in spacing, line ends or its signature line (they refuse it: see Config/validates), push the file again (floodgate config push FILE), which replaces it; otherwise give every change a new version"
			}
		case len(versions) == 1 && len(unknown) > 0:
			c.Status, c.Summary = Pass, fmt.Sprintf("every instance whose version is known runs configuration version %q", vs[0])
		case len(versions) == 1:
			c.Status, c.Summary = Pass, fmt.Sprintf("every instance runs configuration version %q", vs[0])
		case len(unknown) > 0:
			c.Status = Warn
			c.Summary = fmt.Sprintf("the configuration version of %s is unknown: %s did not answer /readyz as a Floodgate instance", plural.Count(len(unknown), "URL", "URLs"), plural.Word(len(unknown), "it", "they"))
			c.Fix = versionUnknownFix(ins)
		case notRead(ins) > 0:
			c.Status, c.Summary, c.Fix = Warn, "no instance was read before doctor's time ran out", deadlineFix
		default:
			c.Status, c.Summary, c.Fix = Warn, "no instance answered", unreadFix(ins)
		}
	})
	r.check(GroupInstances, "redis-and-prefix", func(c *Check) { r.checkSameRedis(ctx, c, ins) })
	r.check(GroupInstances, "fallback-divisor", func(c *Check) { r.checkDivisor(c, ins, read) })
	r.check(GroupInstances, "breakers", func(c *Check) {
		c.Read = read + " (no extra request)"
		worst, seen, unread := Pass, false, 0
		for _, in := range ins {
			if line, ok := metricsUnread(in); ok {
				unread++
				c.Evidence = append(c.Evidence, line)
				continue
			}
			f, ok := in.metrics[metricBreaker]
			if !ok {
				continue
			}
			seen = true
			for _, m := range f.GetMetric() {
				v := m.GetGauge().GetValue()
				state := map[float64]string{0: "closed", 1: "half-open", 2: "open"}[v]
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: partition %s %s", in.url, labels(m)["partition"], state))
				switch {
				case v >= 2:
					worst = Fail
				case v >= 1:
					worst = max(worst, Warn)
				}
			}
		}
		c.Status = worst
		switch {
		case worst == Pass && unread > 0:
			c.Status, c.Summary = Warn, fmt.Sprintf("the breakers of %s are unknown: %s /metrics could not be read", plural.Count(unread, "instance", "instances"), plural.Word(unread, "its", "their"))
			c.Fix = unreadFix(ins)
		case !seen:
			c.Status, c.Summary = Info, "no instance exports "+metricBreaker+" (not exported by this version, or no Redis call yet)"
		case worst == Fail:
			c.Summary = "a breaker is open: that instance decides without Redis"
			c.Fix = "check Redis (or the Cluster primary named by the partition) from that instance's host"
		case worst == Warn:
			c.Summary = "a breaker is half-open: Redis is being probed after failures"
			c.Fix = "watch it close; if it flaps, check Redis latency and the network"
		default:
			c.Summary = "every breaker is closed"
		}
	})
	r.check(GroupInstances, "fallback-and-denials", func(c *Check) { r.checkRates(c, ins, read) })
}

// rate returns the per-second increase of a family between the two
// scrapes of in, and false when either lacks it.
func rate(in *instance, name string) (float64, bool) {
	if in.later == nil {
		return 0, false
	}
	a, ok1 := sum(in.metrics, name, nil)
	b, ok2 := sum(in.later, name, nil)
	if !ok2 {
		return 0, false
	}
	if !ok1 {
		a = 0
	}
	d := in.laterAt.Sub(in.metricsAt).Seconds()
	if d <= 0 || b < a {
		return 0, false
	}
	return (b - a) / d, true
}

func (r *run) checkRates(c *Check, ins []*instance, read string) {
	c.Read = read
	if r.opts.RateWindow > 0 {
		c.Read += fmt.Sprintf(", /metrics again after %v for the current rates", r.opts.RateWindow)
	}
	worst, unread, noRate := Pass, 0, 0
	for _, in := range ins {
		if line, ok := metricsUnread(in); ok {
			unread++
			c.Evidence = append(c.Evidence, line)
			continue
		}
		if r.opts.RateWindow > 0 && in.later == nil {
			// The second scrape did not happen (the run's time ran out
			// first, or it failed): the counts since start are known,
			// the current rates are not.
			noRate++
			c.Evidence = append(c.Evidence, in.url+": no second /metrics scrape (the run's --timeout ended first, or it failed): current rates unknown")
		}
		allowed, _ := sum(in.metrics, metricAllowed, nil)
		denied, _ := sum(in.metrics, metricDenied, nil)
		fb, okFB := sum(in.metrics, metricFallback, nil)
		total := allowed + denied
		line := fmt.Sprintf("%s since start: %.0f allowed, %.0f denied", in.url, allowed, denied)
		if total > 0 {
			line += fmt.Sprintf(" (%.1f%% denied)", 100*denied/total)
		}
		if !okFB {
			line += ", no fallback decision"
		} else {
			line += fmt.Sprintf(", %.0f taken by the fallback", fb)
			if fb > 0 {
				worst = max(worst, Warn)
			}
		}
		c.Evidence = append(c.Evidence, line)
		if fr, ok := rate(in, metricFallback); ok && fr > 0 {
			worst = Fail
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s now: %.2f fallback decisions/s", in.url, fr))
		}
		ar, ok1 := rate(in, metricAllowed)
		dr, ok2 := rate(in, metricDenied)
		if ok1 || ok2 {
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s now: %.2f allowed/s, %.2f denied/s", in.url, ar, dr))
			if dr > 1 && dr > ar {
				worst = max(worst, Warn)
			}
		}
	}
	c.Status = worst
	switch {
	case worst == Pass && noRate > 0 && unread == 0:
		c.Status = Warn
		c.Summary = fmt.Sprintf("no fallback decisions since start, but the current rates of %s are unknown: the second scrape did not happen", plural.Count(noRate, "instance", "instances"))
		c.Fix = fmt.Sprintf("run doctor with a --timeout longer than --rate-window (%v) plus the other checks", r.opts.RateWindow)
		return
	case worst == Pass && unread > 0:
		c.Status = Warn
		c.Summary = fmt.Sprintf("the fallback and denial counts of %s are unknown: %s /metrics could not be read", plural.Count(unread, "instance", "instances"), plural.Word(unread, "its", "their"))
		c.Fix = unreadFix(ins)
		return
	}
	switch worst {
	case Fail:
		c.Summary = "an instance is deciding by its fallback right now: limits are per instance, not global"
		c.Fix = "check Redis from that instance (breakers, latency); the RateLimitFallbackActive alert should be firing"
	case Warn:
		c.Summary = "fallback decisions since start, or more denials than admissions now"
		c.Fix = "a past Redis outage explains old fallback counts; a denial rate above the admissions is an abuse wave or a limit set too low: see /admin/v1/top-denied"
	default:
		c.Summary = "no fallback decisions; denials below admissions"
	}
}
