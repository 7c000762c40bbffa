//go:build !unix

package connlimit

// FileLimit reports false: there is no file descriptor limit to read on
// this system.
func FileLimit() (uint64, bool) { return 0, false }
