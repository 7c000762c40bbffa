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

// errMismatch is Verify's error for a signature made under another key
// than the one given (or over other content).
var errMismatch = errors.New("the signature does not match (another key, or the document was changed after signing)")

// ErrRespaced reports, wrapped with ErrSignature, a document whose
// signature fails only because its spacing or line ends were changed
// after signing (CR LF line ends, trailing spaces): tidied, it verifies.
var ErrRespaced = errors.New("the document differs from one signed under the key only in spacing or line ends (CR LF, trailing spaces), which breaks its signature line; push the file again (floodgate config push FILE)")

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
		return fmt.Errorf("%w: %w", ErrSignature, errMismatch)
	}
	return nil
}

// VerifyAny is Verify against several keys: it succeeds when the
// signature is valid under any of them (the old and the new key while a
// key is rotated). It fails as Verify does for a document not signed, or
// a key shorter than MinSignKeyLen, and wrapping ErrSignature when no key
// matches; with no keys at all, wrapping ErrInvalid. A signed document
// that verifies once its spacing is tidied (CR LF made LF, trailing
// spaces and blank last lines removed) fails wrapping ErrSignature and
// ErrRespaced, which says so, rather than blaming the key.
func VerifyAny(data []byte, keys [][]byte) error {
	err := verifyAny(data, keys)
	if errors.Is(err, ErrSignature) && isSigned(data) {
		if tidy := append(normalizeSpace(data), '\n'); verifyAny(tidy, keys) == nil {
			return fmt.Errorf("%w: %w", ErrSignature, ErrRespaced)
		}
	}
	return err
}

func verifyAny(data []byte, keys [][]byte) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no verification key", ErrInvalid)
	}
	var err error
	for _, key := range keys {
		if err = Verify(data, key); err == nil {
			return nil
		}
		if !errors.Is(err, errMismatch) {
			return err // the same under every key
		}
	}
	if len(keys) == 1 {
		return err
	}
	return fmt.Errorf("%w: the signature matches none of the %d verification keys (another key, or the document was changed after signing)", ErrSignature, len(keys))
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
