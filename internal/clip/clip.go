// Package clip shortens a client's text for an error message, so that an
// answer or a log line quoting it stays small whatever the client sent.
package clip

import "unicode/utf8"

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
