package runwatch

import (
	"context"
	"strconv"
)

// Persistence is what a server process found after a restart or a
// replacement loaded at its start, from INFO persistence: whether its
// counters went back to its last save, to its append-only file, or to
// nothing, or whether it was still loading them when asked.
type Persistence struct {
	// Known reports whether the fields below were read: false when INFO
	// persistence was refused or failed, lacked them (a Redis before
	// 7.0 has no rdb_last_load_keys_loaded), or was answered by another
	// process than the one the change names.
	Known bool
	// AOF is aof_enabled: the server runs with an append-only file,
	// loaded at its start if it had one (a restart that turns AOF on
	// loads nothing, and ignores the RDB snapshot).
	AOF bool
	// LoadedKeys is rdb_last_load_keys_loaded: how many keys the server
	// loaded in RDB form at its start: its snapshot, or a primary's by a
	// full sync when it started as a replica; 0 for none. While Loading,
	// only those loaded so far: a count still rising. With AOF it is not
	// what the server loaded: Redis 7.0 counts only the keys of the
	// append-only file's RDB base (written by a rewrite), none of the
	// commands after it (0 after loading a file of 5 keys, 5 after
	// loading 7 of which 2 were written after a rewrite).
	LoadedKeys int64
	// Loading reports whether the server was still loading its data
	// when asked (INFO persistence's loading:1 or async_loading:1):
	// Redis answers INFO while it loads its RDB snapshot or append-only
	// file, so a check can find it restarted mid-load (review4, twice, a
	// Cluster primary restarted with 2,000,000 keys, said to have loaded
	// 271,587). Its counters will be all it loads, not LoadedKeys.
	Loading bool
	// LoadedPercent is loading_loaded_perc while Loading: how much of
	// the data it loads was loaded when asked, from 0 to 100; -1 when
	// INFO gave none (or not a percentage), 0 when not Loading.
	LoadedPercent float64
}

// persistenceOf asks client for INFO server and persistence, in one
// reply so that both are the same process's, and returns what the
// process whose run_id is runID loaded at its start. Any failure (a
// refusal, an error, another run_id, a field missing or not a number)
// is a Persistence not Known: the change is reported all the same.
func persistenceOf(ctx context.Context, client Client, runID string) Persistence {
	reply, err := client.Info(ctx, "server", "persistence").Result()
	if err != nil {
		return Persistence{}
	}
	return parsePersistence(reply, runID)
}

// parsePersistence reads aof_enabled, rdb_last_load_keys_loaded and,
// while the server loads its data (loading or async_loading 1),
// loading_loaded_perc from an INFO reply holding the server and
// persistence sections, for the process whose run_id is runID (a reply
// with another run_id, or none, is not Known; runID "" accepts a reply
// without one). With AOF on, the keys loaded are not needed.
func parsePersistence(info, runID string) Persistence {
	var p Persistence
	var gotRunID, aof, keys, perc string
	for key, value := range infoFields(info) {
		switch key {
		case "run_id":
			gotRunID = value
		case "aof_enabled":
			aof = value
		case "rdb_last_load_keys_loaded":
			keys = value
		case "loading", "async_loading":
			p.Loading = p.Loading || value == "1"
		case "loading_loaded_perc":
			perc = value
		}
	}
	if gotRunID != runID {
		return Persistence{}
	}
	switch aof {
	case "1":
		p.AOF = true
	case "0":
	default:
		return Persistence{}
	}
	n, err := strconv.ParseInt(keys, 10, 64)
	switch {
	case err == nil && n >= 0:
		p.LoadedKeys = n
	case p.AOF && keys == "":
		// With AOF on, the line does not need the count: 0 then.
	default:
		return Persistence{}
	}
	if p.Loading {
		p.LoadedPercent = percent(perc)
	}
	p.Known = true
	return p
}

// percent reads an INFO percentage ("1.98"): -1 when s is none, or
// not a number from 0 to 100.
func percent(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= 0 && f <= 100) {
		return -1
	}
	return f
}

// withPersistence returns c with the Persistence of its new process
// (c.To), read through client, when c is a restart or a replacement: a
// failover's counters are those it replicated, whatever it loaded.
func withPersistence(ctx context.Context, client Client, c Change) Change {
	if c.Kind == KindRestart || c.Kind == KindReplaced {
		c.Persistence = persistenceOf(ctx, client, c.To.RunID)
	}
	return c
}
