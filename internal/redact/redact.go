// Package redact takes identities out of text bound for a log: storage
// keys carry them (floodgate.Key wraps the encoded identity in a Redis
// Cluster {hash tag}), and so do the store errors that name a key. Log
// lines of httplimit and of floodgate serve go through it.
package redact

import "strings"

// Keys returns s with the identity part of every storage key in it (the
// {hash tag} floodgate.Key wraps it in) replaced by {…}: store errors
// name the key they failed on ("key fg:api:fw:{ruser42} holds a value
// floodgate did not write"), and the log must not carry identities. What
// is outside the braces stays (the prefix, the policy or layer name, the
// algorithm, a quota's period tag). An unclosed tag (a truncated message)
// is dropped with all that follows it, ending in {…. A text without '{'
// is returned as it is, without allocating.
func Keys(s string) string {
	if !strings.Contains(s, "{") {
		return s
	}
	var b strings.Builder
	for {
		open := strings.IndexByte(s, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			// An unclosed tag (a truncated message): drop the rest.
			b.WriteString(s[:open])
			b.WriteString("{…")
			return b.String()
		}
		b.WriteString(s[:open])
		b.WriteString("{…}")
		s = s[open+end+1:]
	}
	b.WriteString(s)
	return b.String()
}
