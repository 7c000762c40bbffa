// Package buildinfo says which build of Floodgate a binary is: its
// version, the VCS revision and commit time it was built from, and the Go
// release that compiled it, taken from a version stamped at link time
// (-ldflags "-X main.version=...") or, without one, from the build
// information Go embeds in every binary (runtime/debug.ReadBuildInfo). It
// exports them as the gauge floodgate_build_info, so that an operator can
// tell which instances run which build during a rolling upgrade.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Dev is the version of a build that names none: not stamped, built
// from no module version and without VCS information (go build outside a
// repository, or with -buildvcs=false).
const Dev = "dev"

// Unknown is the revision label of floodgate_build_info when the build
// names no VCS revision.
const Unknown = "unknown"

// shortRevision is the length of a revision in a version derived from it.
const shortRevision = 12

// Info describes one build. The zero value describes nothing; Read and
// FromBuildInfo always set Version and GoVersion.
type Info struct {
	// Version is the stamped version, else the main module's version
	// (v1.2.3, as go install module@v1.2.3 builds), else the first 12
	// characters of Revision with "-dirty" when Modified, else Dev.
	Version string
	// Revision is the full VCS revision the binary was built from (a git
	// commit hash); empty when unknown.
	Revision string
	// Time is the commit time of Revision, RFC 3339 in UTC as Go records
	// it; empty when unknown.
	Time string
	// Modified reports that the working tree had uncommitted changes.
	Modified bool
	// GoVersion is the Go release that compiled the binary, e.g. go1.26.0.
	GoVersion string
}

// Read returns the running binary's Info: stamped is the version set at
// link time ("" when none was).
func Read(stamped string) Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return FromBuildInfo(stamped, bi)
}

// FromBuildInfo returns the Info of a binary whose version stamped at link
// time is stamped ("" when none was) and whose embedded build information
// is bi (nil when there is none, as in a binary built without module
// support).
func FromBuildInfo(stamped string, bi *debug.BuildInfo) Info {
	info := Info{GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	switch {
	case stamped != "":
		info.Version = stamped
	case bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)":
		info.Version = bi.Main.Version
	case info.Revision != "":
		info.Version = info.Revision[:min(len(info.Revision), shortRevision)]
		if info.Modified {
			info.Version += "-dirty"
		}
	default:
		info.Version = Dev
	}
	return info
}

// Register registers on reg the gauge floodgate_build_info, always 1,
// labelled with info's version, revision (Unknown when empty) and
// goversion: count by (version) (floodgate_build_info) counts the
// instances running each build. It fails as reg.Register does, e.g. when
// the gauge is registered already.
func Register(reg prometheus.Registerer, info Info) error {
	revision := info.Revision
	if revision == "" {
		revision = Unknown
	}
	version, goVersion := info.Version, info.GoVersion
	if version == "" {
		version = Dev
	}
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_build_info",
		Help: "Always 1; its labels name the build this instance runs: version (stamped at link time, else the module version, else the VCS revision's first 12 characters with -dirty for a modified tree, else dev), revision (the full VCS revision, or unknown) and goversion.",
		ConstLabels: prometheus.Labels{
			"version": version, "revision": revision, "goversion": goVersion,
		},
	})
	g.Set(1)
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("floodgate_build_info: %w", err)
	}
	return nil
}
