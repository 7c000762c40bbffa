package server

import (
	"fmt"
	"net/http"
	"strconv"
)

// MaxProfileSeconds bounds the seconds parameter of a CPU profile, an
// execution trace or a delta profile (heap, allocs, block, mutex, ...
// with seconds=N) on the admin handler (Options.Profiling). The process
// has one CPU profiler: net/http/pprof accepts any duration and extends
// the connection's write deadline to match, so one request asking for
// seconds=100000 would hold it, and cost its CPU, for a day while every
// other profile answered 500 "cpu profiling already in use"; a delta
// profile held as long would hold the admin listener's drain.
const MaxProfileSeconds = 300

// boundedProfile serves h (pprof.Profile, pprof.Trace, or pprof.Index,
// which serves the named profiles) when its seconds parameter is absent
// (their defaults: 30 s, 1 s, no delta) or a whole number from 1 to
// MaxProfileSeconds, and answers 400 otherwise.
func boundedProfile(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("seconds"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxProfileSeconds {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.Header().Set("X-Content-Type-Options", "nosniff")
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, "seconds=%q: want a whole number of seconds from 1 to %d\n", v, MaxProfileSeconds)
				return
			}
		}
		h(w, r)
	}
}
