package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// fake returns build information for main module version mainVersion and
// the VCS settings kv (key, value, key, value...).
func fake(mainVersion string, kv ...string) *debug.BuildInfo {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/floodgate-rl/floodgate", Version: mainVersion}}
	for i := 0; i+1 < len(kv); i += 2 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
	}
	return bi
}

const rev = "0505cc7d1a2b3c4d5e6f708192a3b4c5d6e7f809"

// TestFromBuildInfo: a version stamped at link time wins; then the main
// module's version unless it is (devel), as Go 1.24 and later set it from
// Git (a pseudo-version, "+dirty" for a modified tree); then the short
// revision, "+dirty" for a modified tree as in Go's pseudo-version (it
// was "-dirty", so that one tree was marked two ways); then dev.
func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stamped string
		bi      *debug.BuildInfo
		want    Info
	}{
		{"stamped wins over everything", "v1.2.3", fake("v0.9.0", "vcs.revision", rev, "vcs.modified", "true"),
			Info{Version: "v1.2.3", Revision: rev, Modified: true, GoVersion: "go1.99.1"}},
		{"stamped without build info", "v1.2.3", nil,
			Info{Version: "v1.2.3", GoVersion: runtime.Version()}},
		{"module version (go install module@version)", "", fake("v1.4.0"),
			Info{Version: "v1.4.0", GoVersion: "go1.99.1"}},
		{"pseudo-version of a go build in a modified checkout wins over the revision", "",
			fake("v0.0.0-20260102030405-0505cc7d1a2b+dirty", "vcs", "git", "vcs.revision", rev, "vcs.time", "2026-01-02T03:04:05Z", "vcs.modified", "true"),
			Info{Version: "v0.0.0-20260102030405-0505cc7d1a2b+dirty", Revision: rev, Time: "2026-01-02T03:04:05Z", Modified: true, GoVersion: "go1.99.1"}},
		{"devel with a clean revision", "", fake("(devel)", "vcs", "git", "vcs.revision", rev, "vcs.time", "2026-01-02T03:04:05Z", "vcs.modified", "false"),
			Info{Version: "0505cc7d1a2b", Revision: rev, Time: "2026-01-02T03:04:05Z", GoVersion: "go1.99.1"}},
		{"devel with a modified tree", "", fake("(devel)", "vcs.revision", rev, "vcs.modified", "true"),
			Info{Version: "0505cc7d1a2b+dirty", Revision: rev, Modified: true, GoVersion: "go1.99.1"}},
		{"empty module version with a revision", "", fake("", "vcs.revision", rev),
			Info{Version: "0505cc7d1a2b", Revision: rev, GoVersion: "go1.99.1"}},
		{"short revision kept whole", "", fake("(devel)", "vcs.revision", "abc123"),
			Info{Version: "abc123", Revision: "abc123", GoVersion: "go1.99.1"}},
		{"devel without VCS information", "", fake("(devel)"),
			Info{Version: Dev, GoVersion: "go1.99.1"}},
		{"no build information", "", nil,
			Info{Version: Dev, GoVersion: runtime.Version()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromBuildInfo(tc.stamped, tc.bi); got != tc.want {
				t.Errorf("FromBuildInfo(%q, ...) = %+v, want %+v", tc.stamped, got, tc.want)
			}
		})
	}
}

// TestRegister: floodgate_build_info is 1 with the build's labels, none
// of them empty.
func TestRegister(t *testing.T) {
	for _, tc := range []struct {
		name string
		info Info
		want string
	}{
		{"known revision", Info{Version: "v1.2.3", Revision: rev, GoVersion: "go1.99.1"},
			`floodgate_build_info{goversion="go1.99.1",revision="` + rev + `",version="v1.2.3"} 1`},
		{"unknown revision", Info{Version: Dev, GoVersion: "go1.99.1"},
			`floodgate_build_info{goversion="go1.99.1",revision="unknown",version="dev"} 1`},
		{"zero Info", Info{},
			`floodgate_build_info{goversion="` + runtime.Version() + `",revision="unknown",version="dev"} 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			if err := Register(reg, tc.info); err != nil {
				t.Fatal(err)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					var labels []string
					for _, l := range m.GetLabel() {
						labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
					}
					got = append(got, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
				}
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("gathered %q, want [%q]", got, tc.want)
			}
			if err := Register(reg, tc.info); err == nil {
				t.Error("a second Register succeeded, want an error")
			}
		})
	}
}
