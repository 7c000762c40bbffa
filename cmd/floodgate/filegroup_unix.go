//go:build unix

package main

import (
	"os"
	"slices"
	"syscall"
)

// groupIsOurs reports whether the file st describes belongs to a group of
// this process (its own or a supplementary one): a Kubernetes Secret
// volume mounted with the pod's fsGroup is readable by that group.
func groupIsOurs(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	gid := int(sys.Gid)
	if gid == os.Getgid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, gid)
}
