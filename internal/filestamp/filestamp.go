// Package filestamp tells whether a file may have changed without reading
// it: its size, modification time and, where the system keeps one, its
// status change time (ctime). A rewrite in place that keeps the size and
// puts the old modification time back (cp -p or rsync --inplace -t over
// the file, touch -r) changes only the ctime, which nobody can set.
package filestamp

import (
	"io/fs"
	"time"
)

// Stamp is what a poll compares between two looks at one file.
type Stamp struct {
	Size   int64
	Mod    time.Time
	Change int64 // status change time in ns since the epoch; 0 where unknown
}

// Of returns fi's stamp.
func Of(fi fs.FileInfo) Stamp {
	return Stamp{Size: fi.Size(), Mod: fi.ModTime(), Change: changeTime(fi)}
}

// Equal reports whether s and o are the same stamp.
func (s Stamp) Equal(o Stamp) bool {
	return s.Size == o.Size && s.Mod.Equal(o.Mod) && s.Change == o.Change
}
