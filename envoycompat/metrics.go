package envoycompat

import (
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus equivalents of envoyproxy/ratelimit's stats.
// The per-limit counters are labelled by domain and key, the limit's stats
// key without the domain, both named as theirs names its stats (statName;
// from the configuration, so bounded, unless
// detailed_metric or value_to_metric put request values in it, or Envoy
// sends limit overrides); at most MaxSeries distinct (domain, key) pairs
// get their own series, later ones are counted under key "_other".
type Metrics struct {
	perLimit       *prometheus.CounterVec
	notFound       *prometheus.CounterVec
	serviceError   prometheus.Counter
	redisError     prometheus.Counter
	globalShadow   prometheus.Counter
	configLoad     *prometheus.CounterVec
	configRejected prometheus.Gauge
	mu             sync.Mutex
	series         map[[2]string]bool
	notFoundSeries map[string]bool
	max            int
}

// MaxSeries bounds the label pairs of the per-limit counters and the
// domains of floodgate_envoy_domain_not_found_total.
const MaxSeries = 2000

const otherLabel = "_other"

// MaxDomainLabel is the longest unknown domain name, in bytes, that
// floodgate_envoy_domain_not_found_total gives a series of its own; longer
// ones are counted under "_other" (a client could otherwise make each of
// the MaxSeries series megabytes long).
const MaxDomainLabel = 256

// MaxKeyLabel is the longest key label, in bytes, a (domain, key) pair of
// the per-limit counters gets a series of its own for; a longer one is
// counted under "_other". A key holds request values with detailed_metric
// or value_to_metric, and a limit override is keyed by the request's
// entries: without it, each of the MaxSeries pairs could be megabytes
// long (an outside walk: 200 values of 1 MB took a process from 30 to
// 527 MB and its /metrics page to 400 MB, kept for good).
const MaxKeyLabel = 1024

// stat names, the values of label stat.
const (
	statTotalHits      = "total_hits"
	statOverLimit      = "over_limit"
	statNearLimit      = "near_limit"
	statWithinLimit    = "within_limit"
	statShadowMode     = "shadow_mode"
	statOverLimitLocal = "over_limit_with_local_cache"
)

// The values of label result of floodgate_envoy_config_load_total.
const (
	configLoadSuccess = "success"
	configLoadError   = "error"
)

// NewMetrics registers the metrics with reg.
// floodgate_envoy_config_load_total has both its results from the start,
// at 0, and floodgate_envoy_config_rejected is 0 until a load fails.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		perLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_envoy_hits_total",
			Help: "Hits (request costs) per configured limit, by envoyproxy/ratelimit stat: total_hits, within_limit, near_limit, over_limit, over_limit_with_local_cache, shadow_mode.",
		}, []string{"domain", "key", "stat"}),
		notFound: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_envoy_domain_not_found_total",
			Help: "Descriptors of requests naming a domain that is not configured.",
		}, []string{"domain"}),
		serviceError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_envoy_should_rate_limit_errors_total", Help: "ShouldRateLimit calls answered with an error, by type.",
			ConstLabels: prometheus.Labels{"err_type": "service_error"},
		}),
		redisError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_envoy_should_rate_limit_errors_total", Help: "ShouldRateLimit calls answered with an error, by type.",
			ConstLabels: prometheus.Labels{"err_type": "redis_error"},
		}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_envoy_global_shadow_mode_total",
			Help: "Requests answered OK only because SHADOW_MODE is on.",
		}),
		configLoad: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_envoy_config_load_total",
			Help: "Configuration loads, by result: success or error.",
		}, []string{"result"}),
		configRejected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_envoy_config_rejected",
			Help: "1 while the runtime directory holds files that failed to load (the configuration in force stays; none if no load succeeded yet), 0 once they load or are the ones in force again.",
		}),
		series:         map[[2]string]bool{},
		notFoundSeries: map[string]bool{},
		max:            MaxSeries,
	}
	for _, c := range []prometheus.Collector{m.perLimit, m.notFound, m.serviceError, m.redisError, m.globalShadow, m.configLoad, m.configRejected} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every result from the start, at 0 (as serve's
	// floodgate_config_reload_total): a series created by the first
	// failed load would start at 1, and increase() over it stays 0, so
	// RateLimitEnvoyCompatConfigRejected would miss a process's first
	// rejected configuration.
	for _, r := range []string{configLoadSuccess, configLoadError} {
		m.configLoad.WithLabelValues(r)
	}
	return m, nil
}

// ConfigLoaded counts a configuration load and sets
// floodgate_envoy_config_rejected: 0 after a load that succeeded, 1 after
// one that failed. RateLimitEnvoyCompatConfigRejected fires on the gauge.
func (m *Metrics) ConfigLoaded(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.configLoad.WithLabelValues(configLoadSuccess).Inc()
		m.configRejected.Set(0)
	} else {
		m.configLoad.WithLabelValues(configLoadError).Inc()
		m.configRejected.Set(1)
	}
}

// configRestored sets floodgate_envoy_config_rejected to 0 without
// counting a load: the runtime directory holds the files in force again,
// after a rejection, and nothing changes in force.
func (m *Metrics) configRestored() {
	if m == nil {
		return
	}
	m.configRejected.Set(0)
}

func (m *Metrics) add(l *Limit, stat string, n uint64) {
	if m == nil || n == 0 {
		return
	}
	domain, key := metricLabels(l)
	m.mu.Lock()
	k := [2]string{domain, key}
	if !m.series[k] {
		if len(m.series) >= m.max || len(key) > MaxKeyLabel {
			k[1] = otherLabel
		} else {
			// Copies, kept for the process's life (see domainNotFound),
			// which the new series takes too.
			k = [2]string{strings.Clone(domain), strings.Clone(key)}
			m.series[k] = true
		}
	}
	m.mu.Unlock()
	m.perLimit.WithLabelValues(k[0], k[1], stat).Add(float64(n))
}

// metricLabels returns the domain and key labels of l's series: its
// domain and its stats key without the domain, each named as theirs
// names a stat (statName). A domain holding dots (api.example.com) is
// the whole domain, as in domain_not_found: cut at the stats key's
// first '.', it was "api" and the key "example.com.foo".
func metricLabels(l *Limit) (domain, key string) {
	full := l.MetricKey()
	if l.domain != "" && strings.HasPrefix(full, l.domain+".") {
		domain, key = l.domain, full[len(l.domain)+1:]
	} else {
		domain, key, _ = strings.Cut(full, ".") // a Limit not from Match
	}
	return statName(utf8Text(domain)), statName(utf8Text(key))
}

// utf8Text is s where text must be UTF-8: a label value (Prometheus
// requires it: WithLabelValues panics on anything else) and a string of
// the dynamic metadata (protobuf requires it: the response could not be
// encoded, and the call failed). It is s when s is UTF-8, else s with
// each run of bytes that is not UTF-8 replaced by U+FFFD. Envoy sends
// domains and descriptor entries that are not UTF-8 (internal/rlswire
// keeps them; detailed_metric and value_to_metric put values in the key
// label). Two such strings may then read the same; the counters, keyed
// by the bytes, stay apart.
func utf8Text(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// statReplacer and ipv4Run are the rules of statName.
var (
	statReplacer = strings.NewReplacer(":", "_", "|", "_")
	ipv4Run      = regexp.MustCompile(`[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}`)
)

// statName is s as envoyproxy/ratelimit names a stat (its
// SanitizeStatName, applied to the stats key with its domain and to the
// domain of domain_not_found): ':' and '|' become '_', and so do the dots
// of each run that reads as an IPv4 address (four groups of one to three
// digits). Stats keys that differ only there are one series, as they are
// one statsd counter of theirs.
func statName(s string) string {
	if strings.ContainsAny(s, ":|") {
		s = statReplacer.Replace(s)
	}
	if !digitDotDigit(s) {
		return s
	}
	return ipv4Run.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// digitDotDigit reports whether s holds a '.' between two digits, which
// any IPv4 address has: most stats keys do not, and skip the regexp.
func digitDotDigit(s string) bool {
	for i := 1; i+1 < len(s); i++ {
		if s[i] == '.' && isDigit(s[i-1]) && isDigit(s[i+1]) {
			return true
		}
	}
	return false
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func (m *Metrics) domainNotFound(domain string) {
	domain = statName(utf8Text(domain))
	m.mu.Lock()
	if !m.notFoundSeries[domain] {
		// A series per domain name, kept for the process's life: past
		// MaxSeries names, or for a name longer than any configured
		// domain would sensibly be, the count goes to "_other".
		if len(m.notFoundSeries) >= m.max || len(domain) > MaxDomainLabel {
			domain = otherLabel
		} else {
			// A copy: the request's strings may share one allocation
			// with the whole request (internal/rlswire), which a
			// series kept for the process's life would keep too.
			domain = strings.Clone(domain)
			m.notFoundSeries[domain] = true
		}
	}
	m.mu.Unlock()
	m.notFound.WithLabelValues(domain).Inc()
}
