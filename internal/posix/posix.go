// Package posix gives tests the POSIX calls they use on the processes and
// files they start — Kill with SIGSTOP and SIGCONT, Mkfifo, this process's
// CPU time — so that test code compiles on every GOOS. On Unix each is the
// syscall package's call; elsewhere (Windows) each returns
// errors.ErrUnsupported. It is for tests only: library code must not need
// it.
package posix
