package clientip

import (
	"net/netip"
	"strings"
)

// MaxHops is the most forwarding entries a Resolver reads, counted from the
// right. A chain of more trusted proxies than that ends the walk as a junk
// entry would. Reading from the right and stopping early keeps the cost of
// a request bounded by the trusted part of its chain, not by what the
// client wrote.
const MaxHops = 32

// hops calls yield with the addresses of the forwarding entries in lines,
// rightmost first (the last line's last entry first), until yield returns
// false. An entry that is not an address is yielded as the zero Addr, and
// so is the entry after the MaxHops-th, after which it stops. Empty list
// elements are skipped, as RFC 9110 lists allow them.
func hops(lines []string, forwarded bool, yield func(netip.Addr) bool) {
	n := 0
	for i := len(lines) - 1; i >= 0; i-- {
		more := elementsFromRight(lines[i], forwarded, func(elem string) bool {
			if n == MaxHops {
				yield(netip.Addr{})
				return false
			}
			n++
			var a netip.Addr
			if forwarded {
				a = forwardedFor(elem)
			} else {
				a = parseNode(elem)
			}
			return yield(a)
		})
		if !more {
			return
		}
	}
}

// elementsFromRight calls yield with each non-empty, trimmed element of the
// comma-separated list s, rightmost first, and reports whether it ran to
// the end (yield never returned false). With quoted set, commas inside
// double-quoted strings (RFC 9110 quoted-string, with backslash escapes) do
// not separate elements.
func elementsFromRight(s string, quoted bool, yield func(string) bool) bool {
	end := len(s)
	inQuote := false
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		switch {
		case c == '"' && quoted:
			if inQuote && escaped(s, i) {
				continue
			}
			inQuote = !inQuote
		case c == ',' && !inQuote:
			if e := trimOWS(s[i+1 : end]); e != "" && !yield(e) {
				return false
			}
			end = i
		}
	}
	if e := trimOWS(s[:end]); e != "" {
		return yield(e)
	}
	return true
}

// escaped reports whether the byte at i is preceded by an odd number of
// backslashes.
func escaped(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// trimOWS trims the optional white space (spaces and tabs) of HTTP fields.
func trimOWS(s string) string { return strings.Trim(s, " \t") }

// forwardedFor returns the address in the for= parameter of one RFC 7239
// forwarded-element ("for=192.0.2.60;proto=http;by=203.0.113.43"), or the
// zero Addr when the element has no for= parameter, has more than one, has
// a malformed quoted string, or names no address ("unknown", "_hidden").
func forwardedFor(elem string) netip.Addr {
	var node string
	found := false
	for len(elem) > 0 {
		var pair string
		pair, elem = cutPair(elem)
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return netip.Addr{}
		}
		if !strings.EqualFold(trimOWS(name), "for") {
			continue
		}
		if found {
			return netip.Addr{}
		}
		v, ok := unquote(trimOWS(value))
		if !ok {
			return netip.Addr{}
		}
		node, found = v, true
	}
	if !found {
		return netip.Addr{}
	}
	return parseNode(node)
}

// cutPair returns the first ';'-separated pair of elem (honouring quoted
// strings) and the rest after the separator.
func cutPair(elem string) (pair, rest string) {
	inQuote := false
	for i := 0; i < len(elem); i++ {
		switch c := elem[i]; {
		case c == '\\' && inQuote:
			i++
		case c == '"':
			inQuote = !inQuote
		case c == ';' && !inQuote:
			return trimOWS(elem[:i]), elem[i+1:]
		}
	}
	return trimOWS(elem), ""
}

// unquote returns the content of an RFC 9110 quoted-string (undoing
// backslash escapes), or v itself when it is not quoted. It reports false
// for an unterminated quoted string or a quote inside a token.
func unquote(v string) (string, bool) {
	if !strings.HasPrefix(v, `"`) {
		return v, !strings.Contains(v, `"`)
	}
	if len(v) < 2 || v[len(v)-1] != '"' || escaped(v, len(v)-1) {
		return "", false
	}
	v = v[1 : len(v)-1]
	if !strings.Contains(v, `\`) {
		return v, !strings.Contains(v, `"`)
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\\' {
			i++
			if i == len(v) {
				return "", false
			}
			c = v[i]
		} else if c == '"' {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// parseNode parses one forwarding entry: "192.0.2.1", "192.0.2.1:8080",
// "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:8080" (RFC 7239 also
// allows an obfuscated port such as "_p1"). The result is normalised; the
// zero Addr means the entry is not an address.
func parseNode(s string) netip.Addr {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 || !validPort(s[end+1:], true) {
			return netip.Addr{}
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() {
			return netip.Addr{}
		}
		return normalise(a)
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return normalise(a)
	}
	// IPv4 with a port: exactly one colon.
	host, port, ok := strings.Cut(s, ":")
	if !ok || strings.Contains(port, ":") || !validPort(":"+port, false) {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}
	}
	return a
}

// validPort reports whether s is empty (when allowed) or ":" followed by a
// decimal port up to 65535 or an RFC 7239 obfuscated port ("_" and
// [A-Za-z0-9._-]).
func validPort(s string, emptyOK bool) bool {
	if s == "" {
		return emptyOK
	}
	if s[0] != ':' || len(s) == 1 {
		return false
	}
	p := s[1:]
	if p[0] == '_' {
		for i := 1; i < len(p); i++ {
			if c := p[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(p) > 1
	}
	if len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}
