// Package nilcheck tells whether a dependency handed to a constructor is
// nil, including a nil pointer inside a non-nil interface, which a plain
// comparison with nil misses: (*redis.Client)(nil) passed as a Client is
// not == nil, yet panics on first use.
package nilcheck

import "reflect"

// IsNil reports whether v is nil or holds a nil pointer, map, slice,
// function, channel or interface.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
