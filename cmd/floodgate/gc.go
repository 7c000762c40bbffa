package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/floodgate-rl/floodgate/internal/gctune"
)

// defaultGCFloorMiB is the default of --gc-heap-floor-mib: the heap goal
// serve, envoy-compat and loadtest keep at least (see internal/gctune).
const defaultGCFloorMiB = 64

// addGCFlag adds --gc-heap-floor-mib to fl.
func addGCFlag(fl *pflag.FlagSet, mib *int) {
	fl.IntVar(mib, "gc-heap-floor-mib", defaultGCFloorMiB,
		"let the heap grow to this many MiB between garbage collections while the live heap is small, but to no more than 11 times the live heap (fewer collections per request; memory stays within the larger of this and twice the live heap); 0 leaves Go's default; ignored when GOGC is set")
}

// startGC starts the heap floor of --gc-heap-floor-mib; the returned
// function stops it.
func startGC(mib int) (func(), error) {
	if mib < 0 || mib > 1<<20 {
		return nil, fmt.Errorf("--gc-heap-floor-mib %d: want 0 (off) to %d", mib, 1<<20)
	}
	t := gctune.Start(uint64(mib) << 20)
	return t.Stop, nil
}
