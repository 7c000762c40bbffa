package envoyrls

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
)

// nameHashLen is the number of hex digits of the hash that ends every
// derived policy name (48 bits; ParseConfig also rejects any collision).
const nameHashLen = 12

// PolicyName returns the floodgate policy name of the descriptor node at
// path (its entries from the root, values as configured, "" for key-only
// nodes) in domain: a readable part built from the domain and the path,
// cut to fit and with characters outside [A-Za-z0-9_.-] replaced by "_",
// then "-" and 12 hex digits of a SHA-256 of the exact domain and path, so
// that distinct nodes get distinct names within floodgate's 64-character
// limit. For example domain "edge" and path [{remote_address ""}] give
// "edge.remote_address-" followed by the hash.
func PolicyName(domain string, path ...Entry) string {
	h := sha256.New()
	writeField(h, "node")
	writeField(h, domain)
	for _, e := range path {
		writeField(h, e.Key)
		writeField(h, e.Value)
	}
	return derivedName(domain+"."+displayPath(path), h.Sum(nil))
}

// overridePolicyName returns the policy name for limit overrides sent by
// Envoy in a domain, one per window length, so that overrides of different
// units keep separate counters.
func overridePolicyName(domain string, window time.Duration) string {
	h := sha256.New()
	writeField(h, "override")
	writeField(h, domain)
	writeField(h, strconv.FormatInt(window.Microseconds(), 10))
	return derivedName(domain+".override."+window.String(), h.Sum(nil))
}

type hashWriter interface{ Write([]byte) (int, error) }

// writeField writes s length-prefixed, so that field boundaries are part
// of the hash ("a","bc" and "ab","c" differ).
func writeField(h hashWriter, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// readableLen is the longest readable part of a derived name.
const readableLen = floodgate.MaxNameLen - nameHashLen - 1

func derivedName(readable string, sum []byte) string {
	b := make([]byte, 0, floodgate.MaxNameLen)
	b = appendReadable(b, readable)
	b = append(b, '-')
	b = append(b, hex.EncodeToString(sum)[:nameHashLen]...)
	return string(b)
}

// appendReadable appends to b the readable part of a derived name made of
// s: s cut to readableLen bytes, bytes outside [A-Za-z0-9_.-] replaced by
// "_".
func appendReadable(b []byte, s string) []byte {
	for i := 0; i < len(s) && i < readableLen; i++ {
		c := s[i]
		if !nameByte(c) {
			c = '_'
		}
		b = append(b, c)
	}
	return b
}

// maxGuessedMultiplier bounds the windows OverrideWindow tries for a name
// whose readable part was cut before the end of the window: unit_multiplier
// 1 to this many seconds, minutes, hours or days.
const maxGuessedMultiplier = 1000

// OverrideWindow reports whether name is the policy name the limit
// overrides Envoy sends in one of c's domains are decided under (see
// overridePolicyName: one fixed-window policy per domain and window
// length), and if so returns the domain and the window, requests_per_unit
// counting per unit × unit_multiplier. A name is recognised when its hash
// is the one of that domain and window, so names of descriptors and of
// other domains are not. When the domain is so long that the window is
// cut from the readable part, the windows of multipliers up to 1000 of
// each unit are tried (a few thousand hashes); longer ones are not
// recognised then. It is safe for concurrent use.
func (c *Config) OverrideWindow(name string) (domain string, window time.Duration, ok bool) {
	dash := len(name) - nameHashLen - 1
	if dash < 0 || name[dash] != '-' {
		return "", 0, false
	}
	readable := name[:dash]
	for _, d := range c.Domains() {
		head := string(appendReadable(nil, d+".override."))
		rest, found := strings.CutPrefix(readable, head)
		if !found {
			continue
		}
		// The readable part ends with the whole window, unless it was
		// cut (it then fills readableLen bytes; so it does when it just
		// fits).
		w, err := time.ParseDuration(rest)
		if err == nil && validOverrideWindow(w) && w.String() == rest && overridePolicyName(d, w) == name {
			return d, w, true
		}
		if len(readable) < readableLen {
			continue
		}
		for _, unit := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
			for m := time.Duration(1); m <= maxGuessedMultiplier && m*unit <= floodgate.MaxWindow; m++ {
				w := m * unit
				if strings.HasPrefix(w.String(), rest) && overridePolicyName(d, w) == name {
					return d, w, true
				}
			}
		}
	}
	return "", 0, false
}

// validOverrideWindow reports whether w is the window of some limit
// override overrideLimit accepts: a whole number of seconds up to
// floodgate.MaxWindow (unit_multiplier of SECOND).
func validOverrideWindow(w time.Duration) bool {
	return w >= time.Second && w%time.Second == 0 && w <= floodgate.MaxWindow
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// displayPath joins entries as envoyproxy/ratelimit names them: "key" for
// a key-only node, "key_value" otherwise, separated by ".".
func displayPath(path []Entry) string {
	var b strings.Builder
	for i, e := range path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// Identity returns the floodgate identity of a request descriptor: its
// entries as "key=value" joined with "/", with '%', '/' and '=' inside keys
// and values percent-encoded, so that distinct entry lists give distinct
// identities (for example [{user alice}] gives "user=alice"). floodgate.Key
// then keeps it readable or hashes it.
func Identity(entries []Entry) string {
	n := 0
	for _, e := range entries {
		n += escapedLen(e.Key) + 1 + escapedLen(e.Value)
	}
	var b strings.Builder
	b.Grow(n + len(entries))
	for i, e := range entries {
		writeEntry(&b, i, e.Key, e.Value)
	}
	return b.String()
}

// entriesIdentity is Identity of a request's entries, in one allocation.
func entriesIdentity(entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	n := 0
	for _, e := range entries {
		n += escapedLen(e.GetKey()) + 1 + escapedLen(e.GetValue())
	}
	if len(entries) == 1 && n == len(entries[0].GetKey())+1+len(entries[0].GetValue()) {
		return entries[0].GetKey() + "=" + entries[0].GetValue() // nothing to escape
	}
	var b strings.Builder
	b.Grow(n + len(entries))
	for i, e := range entries {
		writeEntry(&b, i, e.GetKey(), e.GetValue())
	}
	return b.String()
}

// writeEntry writes entry i, key and value escaped, to b.
func writeEntry(b *strings.Builder, i int, key, value string) {
	if i > 0 {
		b.WriteByte('/')
	}
	escapeTo(b, key)
	b.WriteByte('=')
	escapeTo(b, value)
}

// escaped reports the bytes Identity escapes.
func escaped(c byte) bool { return c == '%' || c == '/' || c == '=' }

// escapedLen is the length of s escaped.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if escaped(s[i]) {
			n += 2
		}
	}
	return n
}

func escapeTo(b *strings.Builder, s string) {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		if c := s[i]; escaped(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		} else {
			b.WriteByte(c)
		}
	}
}
