// Package regularfile opens files that must be regular files once
// symbolic links are followed (configuration documents, certificates,
// keys, secrets) without ever waiting on one that is not: a named pipe
// swapped in for such a file (mkfifo, <(command), /dev/stdin) makes a
// plain open wait for a writer, for good, and with it a reload, a start or
// a shutdown.
package regularfile

import (
	"crypto/tls"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Error is the error for a path that is not a regular file once symbolic
// links are followed. It is never a reason the path was opened and read:
// the check is made first.
type Error struct {
	Path string
	Mode fs.FileMode // the mode of what Path names
}

// Reason says what Path is, without naming it: "is a named pipe: want a
// regular file (or a symbolic link to one); it is not read, since its read
// may never end", "is a directory: want a regular file (or a symbolic
// link to one)".
func (e *Error) Reason() string {
	m := e.Mode
	var what string
	switch {
	case m.IsDir():
		return "is a directory: want a regular file (or a symbolic link to one)"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeDevice != 0:
		what = "a device"
	default:
		what = fmt.Sprintf("not a regular file (mode %v)", m)
	}
	return "is " + what + ": want a regular file (or a symbolic link to one); it is not read, since its read may never end"
}

// Error is Path followed by Reason.
func (e *Error) Error() string { return e.Path + " " + e.Reason() }

// Check returns nil when fi, path's os.Stat, is a regular file, and an
// *Error otherwise.
func Check(path string, fi fs.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	return &Error{Path: path, Mode: fi.Mode().Type()}
}

// Stat is os.Stat, and an *Error for a path that is not a regular file
// once symbolic links are followed.
func Stat(path string) (fs.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	return fi, Check(path, fi)
}

// Open opens path for reading when it is a regular file once symbolic
// links are followed, and otherwise returns an *Error without reading
// it. It opens without blocking (O_NONBLOCK: a named pipe opens at once,
// with or without a writer) and checks the opened file itself, so a file
// swapped for a pipe between a caller's look at it and the open is
// refused too, where a blocking open would wait for a writer for good.
// O_NONBLOCK changes nothing in the reads of a regular file. It opens
// with O_NOCTTY too, so that a terminal it refuses does not become the
// controlling terminal of a process that has none.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		// A socket cannot be opened (ENXIO): say what it is.
		if fi, serr := os.Stat(path); serr == nil && !fi.Mode().IsRegular() {
			return nil, Check(path, fi)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = Check(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile reads the regular file at path as os.ReadFile does, through
// Open: a path that is not a regular file is an *Error, unread.
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// LoadX509KeyPair is tls.LoadX509KeyPair reading both files through
// ReadFile: a certificate or key file that is not a regular file (a named
// pipe) is an *Error, unread.
func LoadX509KeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}
