package envoycompat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/crossorigin"
)

// Health components, as theirs names them.
const (
	ComponentRedis   = "redis"
	ComponentConfig  = "config"
	ComponentSigterm = "sigterm"
)

// HealthService is the gRPC health service name whose status follows the
// components (theirs: "ratelimit").
const HealthService = "ratelimit"

// Health is the service's health: healthy when every component is. It
// answers GET /healthcheck ("OK", or 500) and sets the gRPC health status
// of HealthService. Safe for concurrent use.
type Health struct {
	mu    sync.Mutex
	comps map[string]bool
	ok    atomic.Bool
	grpc  *health.Server
}

// NewHealth starts with redis unhealthy, config unhealthy when
// needConfig (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), sigterm healthy.
func NewHealth(gs *health.Server, needConfig bool) *Health {
	h := &Health{comps: map[string]bool{ComponentRedis: false, ComponentSigterm: true}, grpc: gs}
	if needConfig {
		h.comps[ComponentConfig] = false
	}
	h.update()
	return h
}

// Set marks a component healthy or not; components NewHealth did not
// create are ignored.
func (h *Health) Set(component string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, known := h.comps[component]; !known {
		return
	}
	h.comps[component] = ok
	h.update()
}

func (h *Health) update() {
	all := true
	for _, ok := range h.comps {
		all = all && ok
	}
	h.ok.Store(all)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if all {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.grpc.SetServingStatus(HealthService, st)
}

// Healthy reports whether every component is healthy.
func (h *Health) Healthy() bool { return h.ok.Load() }

// ServeHTTP answers 200 "OK" when healthy, else 500.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if h.ok.Load() {
		_, _ = w.Write([]byte("OK"))
		return
	}
	w.WriteHeader(http.StatusInternalServerError)
}

// maxJSONBody bounds a POST /json body.
const maxJSONBody = 1 << 20

// jsonBuffers holds the request and response buffers of POST /json calls
// in progress, reused across requests.
var jsonBuffers = sync.Pool{New: func() any { return new(jsonBuffer) }}

// jsonBuffer is one call's body and answer.
type jsonBuffer struct {
	in  bytes.Buffer
	out []byte
}

// maxPooledJSON is the largest buffer put back in jsonBuffers: a rare big
// body is left to the collector rather than kept.
const maxPooledJSON = 64 << 10

// jsonContentType is the Content-Type header of every /json answer,
// shared (net/http only reads it).
var jsonContentType = []string{"application/json"}

// HTTPHandler serves their main HTTP port: /json (a RateLimitRequest in
// protobuf JSON; the RateLimitResponse back, 429 when OVER_LIMIT, 400 for
// a request that cannot be read or is refused) and /healthcheck.
//
// Unlike theirs, /json refuses (403), counting nothing, a request other
// than GET, HEAD and OPTIONS that a browser sent on behalf of a web page
// (internal/crossorigin): one carrying an Origin header, whatever it is,
// or without one a Sec-Fetch-Site naming another site. A page on any site
// could otherwise make its visitor's browser POST a text/plain form (no
// CORS preflight) to a service it can reach and spend anyone's limits;
// the service serves no page of its own, and a page whose DNS name is
// rebound to its address (DNS rebinding) sends an Origin matching the
// Host. Envoy, services and curl send neither header and are served as by
// theirs.
func (s *Service) HTTPHandler(h *Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthcheck", h)
	mux.Handle("/json", refuseBrowsers(http.HandlerFunc(s.serveJSON)))
	return mux
}

// refuseBrowsers serves h, answering 403 the requests HTTPHandler
// documents as refused; nothing was counted.
func refuseBrowsers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			site, origin := r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin")
			switch crossorigin.Check(nil, site, origin) {
			case crossorigin.UntrustedOrigin:
				http.Error(w, fmt.Sprintf("Forbidden: a browser sent this request on behalf of a web page (Origin %.100q), "+
					"and this service serves no page that sends it: the page is another site's, or one whose DNS name points to this service "+
					"(DNS rebinding); nothing was counted", origin), http.StatusForbidden)
				return
			case crossorigin.CrossSite:
				http.Error(w, "Forbidden: a browser sent this request from a page of another site; nothing was counted", http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// serveJSON answers POST /json.
func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	buf := jsonBuffers.Get().(*jsonBuffer)
	defer func() {
		if buf.in.Cap() <= maxPooledJSON && cap(buf.out) <= maxPooledJSON {
			jsonBuffers.Put(buf)
		}
	}()
	buf.in.Reset()
	if _, err := buf.in.ReadFrom(http.MaxBytesReader(w, r.Body, maxJSONBody)); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			s.logUnreadable(r, fmt.Errorf("the body is longer than %d bytes", int64(maxJSONBody)))
		} // else the client went away while sending it: nobody to tell
		http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
		return
	}
	req, err := decodeRequestMax(buf.in.Bytes(), s.opts.MaxDescriptors)
	if err != nil {
		s.logUnreadable(r, err)
		http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
		return
	}
	if err := s.checkCount(r.Context(), r.RemoteAddr, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest) // Floodgate's own refusal: it says why
		return
	}
	resp, err := s.shouldRateLimit(r.Context(), r.RemoteAddr, req)
	if err != nil {
		http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
		return
	}
	out, ok := appendResponse(buf.out[:0], resp)
	if !ok {
		if out, err = marshalCompact(resp); err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
	} else {
		buf.out = out
	}
	w.Header()["Content-Type"] = jsonContentType
	switch resp.GetOverallCode() {
	case rlspb.RateLimitResponse_UNKNOWN:
		w.WriteHeader(http.StatusInternalServerError)
	case rlspb.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}

// maxLoggedJSONError is the most bytes of a decoding error's text the
// unreadable-body log line quotes: protojson's messages quote the body.
const maxLoggedJSONError = 300

// logUnreadable logs a POST /json whose body is not a RateLimitRequest
// (malformed JSON, a field RateLimitRequest lacks, a body over
// maxJSONBody), at warn level and at most one line per Options.LogEvery.
// Such a request never reaches ShouldRateLimit, so, as with theirs, no
// counter counts it; without the line, a client sending them saw only
// "Bad Request" and the operator nothing at all.
func (s *Service) logUnreadable(r *http.Request, err error) {
	if s.log == nil {
		return
	}
	s.log.Log(r.Context(), slog.LevelWarn, "unreadable json", "POST /json: the body is not a RateLimitRequest (answered 400)",
		"client", r.RemoteAddr, "content_length", r.ContentLength, "error", clip.Text(err.Error(), maxLoggedJSONError))
}

// DebugHandler serves their debug port: /rlconfig (the configuration in
// force, one line per limit), /metrics (Prometheus) and / (the list).
func (s *Service) DebugHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	endpoints := map[string]string{
		"/rlconfig": "print out the currently loaded configuration for debugging",
		"/metrics":  "Prometheus metrics",
	}
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		if c := s.Config(); c != nil {
			_, _ = io.WriteString(w, c.Dump())
		}
	})
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		keys := make([]string, 0, len(endpoints))
		for k := range endpoints {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s: %s\n", k, endpoints[k])
		}
	})
	return mux
}

// Reloader loads the runtime directory into a Service and reloads it when
// it changes, as their file provider does: a configuration that fails to
// load is logged and counted, and the one in force stays.
type Reloader struct {
	Runtime Runtime
	Merge   bool
	Service *Service
	Metrics *Metrics
	Health  *Health // config component; may be nil
	// HealthyWithConfig marks the config component healthy only when the
	// loaded configuration has a domain (their
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	HealthyWithConfig bool
	Log               *slog.Logger
	// Now, when set, makes Watch load the configuration at once on every
	// receive, changed or not (floodgate envoy-compat sends here on
	// SIGHUP).
	Now <-chan struct{}

	sig       string
	activeSum string // filesSum of the files of the configuration in force
	rejected  bool   // the last load failed
	// activeNoDir: the configuration in force is the empty one of a
	// runtime directory that did not exist.
	activeNoDir bool
}

// Load reads and applies the configuration once; the error says why it
// was not applied. After a failed load, files that are those of the
// configuration in force again are not applied nor counted as a load
// (nothing changes in force): floodgate_envoy_config_rejected goes back
// to 0 and the log says so.
//
// A runtime directory that does not exist loads an empty configuration
// while none is in force (at start with RUNTIME_WATCH_ROOT=true, as
// theirs) or the one in force came from it missing; once the directory
// gave a configuration, its disappearance (removed, or RUNTIME_ROOT's
// link swapped to a directory that does not exist) fails the load and
// the configuration in force stays: loaded, its empty configuration
// answered every domain OK without a limit.
func (r *Reloader) Load() error {
	r.sig = r.Runtime.Signature()
	files, err := r.Runtime.Files()
	var noDir *noDirError
	missing := errors.As(err, &noDir)
	if missing && (r.Service.Config() == nil || r.activeNoDir) {
		files, err = nil, nil
	}
	if err == nil && r.rejected && r.Service.Config() != nil && filesSum(files) == r.activeSum && missing == r.activeNoDir {
		r.rejected = false
		r.Metrics.configRestored()
		// At warning level, as the error it ends (envoy-compat's
		// LOG_LEVEL is WARN by default).
		r.Log.Warn("runtime directory holds the configuration in force again", "files", fileNames(files))
		return nil
	}
	if err == nil {
		var cfg *Config
		cfg, err = Load(files, r.Merge)
		if err == nil {
			for _, w := range cfg.Warnings() {
				r.Log.Warn("envoy-compat configuration: " + w)
			}
			r.Service.SetConfig(cfg)
			r.activeSum, r.rejected, r.activeNoDir = filesSum(files), false, missing
			r.Metrics.ConfigLoaded(true)
			if r.Health != nil && r.HealthyWithConfig {
				r.Health.Set(ComponentConfig, !cfg.Empty())
			}
			r.Log.Info("Successfully loaded new configuration", "files", fileNames(files), "domains", cfg.Domains())
			if len(files) == 0 {
				// Loaded all the same, as theirs: an empty configuration,
				// under which every domain is unknown and answered OK
				// without a limit. Most often a wrong RUNTIME_* path.
				r.Log.Warn("no descriptor files found: every domain is unknown and answered OK without a limit; check RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY", "dir", r.Runtime.dir())
			}
			return nil
		}
	}
	r.rejected = true
	r.Metrics.ConfigLoaded(false)
	if r.Service.Config() == nil {
		// At start, or after nothing but rejected ones: none is in force.
		r.Log.Error("Error loading new configuration; no configuration in force: every request is answered with an error until a valid one is loaded", "error", err)
		return err
	}
	r.Log.Error("Error loading new configuration; keeping the one in force", "error", err)
	return err
}

// Watch reloads whenever the runtime signature changes, polling every
// interval, and on every receive from Now, until ctx ends.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.Now:
			_ = r.Load()
			continue
		case <-t.C:
		}
		if sig := r.Runtime.Signature(); sig != r.sig {
			_ = r.Load()
		}
	}
}
