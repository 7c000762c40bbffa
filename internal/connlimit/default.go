package connlimit

// Default returns the connections the public listeners may hold open at
// once in a process whose file descriptor limit is nofile: nofile less a
// reserve of a quarter of it, at least 256 and at most half of nofile, for
// everything else that takes a descriptor (the Redis connections, their
// pools growing on a burst, the admin and probes' listeners and their
// clients, the files read and the process's own). 1024 gives 768; 65,536
// gives 49,152; a limit of 1 or less gives 1.
func Default(nofile uint64) int {
	const most = 1 << 30 // an unlimited limit (RLIM_INFINITY) is no limit
	n := min(nofile, most)
	reserve := max(n/4, min(256, n/2))
	return int(max(n-reserve, 1))
}

// SideMax is the most connections each listener beside the public ones
// (floodgate serve's admin and probes' listeners, envoy-compat's debug
// and Prometheus listeners) holds open at once. Their
// clients are few and known (the kubelet's probes, a connection each;
// Prometheus's scrapes and the operators' calls, one or two keep-alive
// connections each): 64 serves them many times over, while a flood of
// them holds at most 64 descriptors, and the one idle longest is closed
// for a new probe once idle 1 s.
const SideMax = 64

// Side returns the connections each listener beside the public ones may
// hold open at once, in a process whose file descriptor limit is nofile
// and whose public listeners hold public at most: SideMax, or a quarter of
// the reserve public leaves if less (the admin and probes' listeners
// together then take half of it, the other half left to Redis and the
// files), at least 8 (a public budget above Default leaves less than the
// reserve, as warned). 256 descriptors with the default public budget,
// 128, give 32; 1,024 and more give 64.
func Side(nofile uint64, public int) int {
	const most = 1 << 30 // as Default: an unlimited limit is no limit
	reserve := int64(min(nofile, most)) - int64(public)
	return int(min(SideMax, max(reserve/4, 8)))
}
