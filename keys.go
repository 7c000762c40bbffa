package floodgate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unsafe"

	"github.com/floodgate-rl/floodgate/internal/clip"
)

// EncodeIdentity maps any identity (any bytes, any length) to a short
// string of safe bytes that contains no ':', '{' or '}'. Distinct identities
// map to distinct encodings: a readable identity is kept as "r"+identity, any
// other becomes "h"+ the first 32 hex digits of its SHA-256 (128 bits,
// collision-resistant). The result is at most 65 bytes.
func EncodeIdentity(identity string) string {
	b := appendIdentity(make([]byte, 0, 1+max(len(identity), 32)), identity)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendIdentity appends EncodeIdentity(identity) to b.
func appendIdentity(b []byte, identity string) []byte {
	if readable(identity) {
		b = append(b, 'r')
		return append(b, identity...)
	}
	sum := sha256.Sum256([]byte(identity))
	var h [32]byte
	hex.Encode(h[:], sum[:16])
	b = append(b, 'h')
	return append(b, h[:]...)
}

// readable reports whether identity is kept as it is in keys.
func readable(identity string) bool {
	if len(identity) > MaxIdentityLen {
		return false
	}
	for i := 0; i < len(identity); i++ {
		if !isIdentityByte(identity[i]) {
			return false
		}
	}
	return true
}

func isIdentityByte(c byte) bool { return identityBytes[c] }

// identityBytes[c] reports whether c may appear in a readable identity.
var identityBytes = func() (t [256]bool) {
	for c := range 256 {
		b := byte(c)
		t[c] = isNameByte(b) || b == '@' || b == '+' || b == '=' || b == '/'
	}
	return t
}()

// ValidatePrefix reports, wrapped in ErrInvalidKey, why prefix cannot start
// storage keys: it must be 1..64 bytes from [A-Za-z0-9_.:-].
func ValidatePrefix(prefix string) error {
	if prefix == "" || len(prefix) > MaxPrefixLen {
		return fmt.Errorf("%w: prefix %q (%d bytes) must be 1..%d bytes", ErrInvalidKey, clip.Text(prefix, 80), len(prefix), MaxPrefixLen)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; !isNameByte(c) && c != ':' {
			return fmt.Errorf("%w: prefix %q: %s not in [A-Za-z0-9_.:-]", ErrInvalidKey, clip.Text(prefix, 80), clip.Char(prefix, i))
		}
	}
	return nil
}

// Key returns the storage key of identity under policy p:
//
//	prefix ":" name ":" algorithm ":{" EncodeIdentity(identity) "}"
//
// for example "fg:api:sw:{ruser42}". The braces are a Redis Cluster hash
// tag: all keys of one identity (across policies) share one slot, and the
// identity cannot pick another slot or escape its namespace. prefix must be
// valid (see ValidatePrefix) and p.Name valid.
func Key(prefix string, p Policy, identity string) string {
	return key(prefix, p, identity, "")
}

// key builds a storage key in one allocation, with an optional period tag.
func key(prefix string, p Policy, identity, tag string) string {
	b := appendKey(make([]byte, 0, keyLen(prefix, p, identity, tag)), prefix, p, identity, tag)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
}

// keyLen is the length of the key appendKey builds.
func keyLen(prefix string, p Policy, identity, tag string) int {
	n := 1 + len(identity)
	if !readable(identity) {
		n = 33
	}
	if tag != "" {
		n += 1 + len(tag)
	}
	return len(prefix) + len(p.Name) + len(p.Algorithm.short()) + n + 5
}

// appendKey appends the storage key of identity under p, with an optional
// period tag, to b.
func appendKey(b []byte, prefix string, p Policy, identity, tag string) []byte {
	b = append(b, prefix...)
	b = append(b, ':')
	b = append(b, p.Name...)
	b = append(b, ':')
	b = append(b, p.Algorithm.short()...)
	b = append(b, ":{"...)
	b = appendIdentity(b, identity)
	b = append(b, '}')
	if tag != "" {
		b = append(b, ':')
		b = append(b, tag...)
	}
	return b
}
