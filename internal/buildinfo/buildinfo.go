// Package buildinfo says which build of Floodgate a binary is: its
// version, the VCS revision and commit time it was built from, and the Go
// release that compiled it, taken from a version stamped at link time
// (-ldflags "-X main.version=...") or, without one, from the build
// information Go embeds in every binary (runtime/debug.ReadBuildInfo). It
// exports them as the gauge floodgate_build_info, so that an operator can
// tell which instances run which build during a rolling upgrade.
//
// What each way of building gives as the version, with Go 1.26 (Go
// stamps VCS information only with -buildvcs=auto, its default, or true;
// a GOFLAGS of -buildvcs=false turns it off everywhere):
//
//   - go build -ldflags "-X main.version=v1.3.0" (deploy/build-image.sh):
//     v1.3.0, whatever else the build records.
//   - go install github.com/floodgate-rl/floodgate/cmd/floodgate@v1.3.0:
//     v1.3.0, the module's version.
//   - go build or go install in a Git checkout: since Go 1.24 the main
//     module's version comes from Git, v1.3.0 on a commit tagged so, else
//     a pseudo-version naming the commit time and the revision's first 12
//     characters, v0.0.0-20261206222540-d241fc6024f9 (v1.3.1-0.2026...
//     after a tag v1.3.0), with "+dirty" for a tree with uncommitted
//     changes; the revision and commit time are recorded too.
//   - go run in a Git checkout, go build in a Git worktree (Go looks for a
//     .git directory, and a worktree's .git is a file), with
//     -buildvcs=false, or from a source export without .git (git
//     archive): dev, revision unknown. Such builds cannot be told apart by
//     their version.
//
// A build that records a VCS revision but no module version ((devel),
// as Go before 1.24 built) gets the revision's first 12 characters,
// d241fc6024f9, with "+dirty" for a modified tree, as Go's own
// pseudo-version marks it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Dev is the version of a build that names none: not stamped, with no
// module version and no VCS information (go run, a go build in a Git
// worktree, outside a repository or with -buildvcs=false).
const Dev = "dev"

// Unknown is the revision label of floodgate_build_info when the build
// names no VCS revision.
const Unknown = "unknown"

// shortRevision is the length of a revision in a version derived from it.
const shortRevision = 12

// dirty marks a version derived from the revision of a modified tree, as
// Go marks the pseudo-version of one (v0.0.0-...-d241fc6024f9+dirty), so
// that both kinds of version say it the same way.
const dirty = "+dirty"

// Info describes one build. The zero value describes nothing; Read and
// FromBuildInfo always set Version and GoVersion.
type Info struct {
	// Version is the stamped version, else the main module's version
	// (v1.2.3, as go install module@v1.2.3 builds, or the pseudo-version
	// of a go build in a Git checkout,
	// v0.0.0-20261206222540-d241fc6024f9+dirty), else the first 12
	// characters of Revision with "+dirty" when Modified, else Dev.
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
			info.Version += dirty
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
		Help: "Always 1; its labels name the build this instance runs: version (stamped at link time, -ldflags -X main.version=v1.3.0; else the main module's version: v1.3.0 for go install module@v1.3.0, or for a go build in a Git checkout a pseudo-version such as v0.0.0-20261206222540-d241fc6024f9, +dirty for a modified tree; else, for a build recording a VCS revision but no module version, the revision's first 12 characters, +dirty likewise; else dev, as for go run, a Git worktree, -buildvcs=false or a source export), revision (the full VCS revision, or unknown) and goversion.",
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
