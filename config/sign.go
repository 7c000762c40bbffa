package config

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrSignature reports a configuration document from Redis whose signature
// is missing or does not match the verification key.
var ErrSignature = errors.New("config: bad or missing signature")

// MinSignKeyLen is the shortest accepted signing key, in bytes.
const MinSignKeyLen = 32

// signaturePrefix starts the last line of a signed document: a YAML
// comment, so a signed document parses like the unsigned one.
const signaturePrefix = "# floodgate-signature: hmac-sha256="

// Sign returns data with a last line holding the HMAC-SHA256, under key,
// of everything before it (replacing a signature data already ends with).
func Sign(data, key []byte) ([]byte, error) {
	if len(key) < MinSignKeyLen {
		return nil, fmt.Errorf("%w: signing key of %d bytes, want at least %d", ErrInvalid, len(key), MinSignKeyLen)
	}
	body, _ := splitSignature(data)
	if len(body) > 0 && body[len(body)-1] != '\n' {
		body = append(body[:len(body):len(body)], '\n')
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	out := append([]byte(nil), body...)
	out = append(out, signaturePrefix...)
	out = hex.AppendEncode(out, mac.Sum(nil))
	return append(out, '\n'), nil
}

// Verify checks the signature line Sign appends to data against key and
// fails, wrapping ErrSignature, when it is missing or wrong, and wrapping
// ErrInvalid when key is shorter than MinSignKeyLen.
func Verify(data, key []byte) error {
	if len(key) < MinSignKeyLen {
		// No document can be signed under such a key (see Sign).
		return fmt.Errorf("%w: verification key of %d bytes, want at least %d", ErrInvalid, len(key), MinSignKeyLen)
	}
	body, sig := splitSignature(data)
	if sig == nil {
		return fmt.Errorf("%w: the document is not signed (push it with --sign-key-file)", ErrSignature)
	}
	want, err := hex.DecodeString(string(sig))
	if err != nil {
		return fmt.Errorf("%w: malformed signature", ErrSignature)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), want) {
		return fmt.Errorf("%w: the signature does not match (another key, or the document was changed after signing)", ErrSignature)
	}
	return nil
}

// splitSignature returns the document before its signature line and the
// signature's hex digits, or data and nil when its last line is not one.
func splitSignature(data []byte) (body, sig []byte) {
	trimmed := bytes.TrimRight(data, "\n")
	i := bytes.LastIndexByte(trimmed, '\n') + 1
	last := trimmed[i:]
	if rest, ok := bytes.CutPrefix(last, []byte(signaturePrefix)); ok {
		return data[:i], rest
	}
	return data, nil
}

// Unsigned returns data without the signature line Sign appends, or data
// itself when its last line is not one: the document as signed, which is
// the one given to Sign but for the final newline Sign adds to a document
// that lacks one.
func Unsigned(data []byte) []byte {
	body, _ := splitSignature(data)
	return body
}

// isSigned reports whether data ends with a signature line (valid or not).
func isSigned(data []byte) bool {
	_, sig := splitSignature(data)
	return sig != nil
}

// SignedLen returns the length in bytes of what Sign returns for data,
// under any key: config validate uses it to warn of a file that a
// signature line takes over MaxSize.
func SignedLen(data []byte) int {
	body, _ := splitSignature(data)
	n := len(body)
	if n > 0 && body[n-1] != '\n' {
		n++
	}
	return n + len(signaturePrefix) + hex.EncodedLen(sha256.Size) + 1
}
