package envoyrls

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of these with
// %w, so callers test them with errors.Is.
var (
	// ErrInvalidConfig reports a descriptor configuration that cannot be
	// used. The message says where (file:line:column) and why.
	ErrInvalidConfig = errors.New("envoyrls: invalid configuration")
	// ErrInvalidRequest reports a RateLimitRequest that cannot be decided
	// (empty or unknown domain, no descriptors, too many, a bad hits_addend
	// or limit override...). The service answers it with the gRPC status
	// INVALID_ARGUMENT and consumes nothing.
	ErrInvalidRequest = errors.New("envoyrls: invalid request")
	// ErrInvalidOptions reports Options out of range.
	ErrInvalidOptions = errors.New("envoyrls: invalid options")
)

// ConfigError is one problem in a descriptor configuration file, at a
// position. It wraps ErrInvalidConfig.
type ConfigError struct {
	// File is the file name given to ParseConfig.
	File string
	// Line and Column are 1-based; zero when unknown.
	Line, Column int
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as "envoyrls: invalid configuration:
// file:line:column: message".
func (e *ConfigError) Error() string {
	pos := e.File
	switch {
	case e.Line > 0 && e.Column > 0:
		pos = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
	case e.Line > 0:
		pos = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	return fmt.Sprintf("%v: %s: %s", ErrInvalidConfig, pos, e.Msg)
}

// Unwrap makes every ConfigError match ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// invalidRequest returns an error wrapping ErrInvalidRequest.
func invalidRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}
