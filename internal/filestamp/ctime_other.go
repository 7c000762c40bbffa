//go:build !linux

package filestamp

import "io/fs"

// changeTime is unknown here: the size and modification time decide.
func changeTime(fs.FileInfo) int64 { return 0 }
