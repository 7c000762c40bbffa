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
	// (empty or unknown domain, no descriptors or too many, too many
	// limited ones, is_negative_hits, a bad limit override...). The
	// service answers it with the gRPC status INVALID_ARGUMENT and
	// consumes nothing.
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
	return fmt.Sprintf("%v: %s", ErrInvalidConfig, e.Located())
}

// Located formats the problem as "file:line:column: message" (without
// the line and column when unknown), as floodgate's policy errors read:
// for tools that print problems one per line.
func (e *ConfigError) Located() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Unwrap makes every ConfigError match ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Rejection is why the service refused a request before deciding it (see
// Options.OnRejected): one of a closed set, fit for a metric label.
type Rejection string

// The Rejections.
const (
	// RejectNoConfig: no configuration loaded (UNAVAILABLE).
	RejectNoConfig Rejection = "no_config"
	// RejectDomain: an empty or unknown domain.
	RejectDomain Rejection = "domain"
	// RejectDescriptors: no descriptors, more than
	// MaxRequestDescriptors descriptors, or more than MaxDescriptors
	// distinct limited counters.
	RejectDescriptors Rejection = "descriptors"
	// RejectDescriptor: a descriptor that is null or has no entries, or
	// an entry that is null.
	RejectDescriptor Rejection = "descriptor"
	// RejectHitsAddend: is_negative_hits. (A hits_addend above the
	// maximum is not refused: its descriptor is OVER_LIMIT.)
	RejectHitsAddend Rejection = "hits_addend"
	// RejectLimitOverride: a limit override that cannot be applied.
	RejectLimitOverride Rejection = "limit_override"
	// RejectMessageSize: a message over the gRPC server's receive limit
	// (RESOURCE_EXHAUSTED, answered by gRPC; see Service.Register).
	RejectMessageSize Rejection = "message_size"
)

// Rejections returns every Rejection, for metrics that start each series
// at 0.
func Rejections() []Rejection {
	return []Rejection{RejectNoConfig, RejectDomain, RejectDescriptors, RejectDescriptor, RejectHitsAddend, RejectLimitOverride, RejectMessageSize}
}

// requestError is an invalid request: why, and what it says. It wraps
// ErrInvalidRequest.
type requestError struct {
	reason Rejection
	msg    string
}

func (e *requestError) Error() string { return ErrInvalidRequest.Error() + ": " + e.msg }

func (e *requestError) Unwrap() error { return ErrInvalidRequest }

// invalidRequest returns an error wrapping ErrInvalidRequest, refused for
// reason.
func invalidRequest(reason Rejection, format string, args ...any) error {
	return &requestError{reason: reason, msg: fmt.Sprintf(format, args...)}
}
