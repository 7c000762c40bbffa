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
