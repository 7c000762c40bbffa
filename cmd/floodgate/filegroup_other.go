//go:build !unix

package main

import "os"

// groupIsOurs reports false: file groups are a Unix notion.
func groupIsOurs(os.FileInfo) bool { return false }
