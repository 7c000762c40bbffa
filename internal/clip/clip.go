// Package clip shortens a client's text for an error message, so that an
// answer or a log line quoting it stays small whatever the client sent.
package clip

import (
	"fmt"
	"unicode/utf8"
)

// Text returns s when it is at most n bytes long, else its first n bytes
// or fewer, cut at a character boundary, followed by "...".
func Text(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// Char names the character of s that starts at byte i, for an error
// message refusing it: "character 'é'" for a valid one (ASCII or not; %q
// of the byte s[i] would print a non-ASCII character's first byte as
// another character, 'Ã' for 'é'), "byte 0xff" for a byte that starts no
// valid UTF-8 character.
func Char(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("byte 0x%02x", s[i])
	}
	return fmt.Sprintf("character %q", r)
}
