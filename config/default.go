package config

import (
	_ "embed"
)

//go:embed default.yaml
var defaultYAML string

// DefaultName is the source name of the built-in example configuration.
const DefaultName = "builtin:floodgate.yaml"

// DefaultYAML returns the built-in example configuration document (the same
// as examples/floodgate.yaml): tiers free, pro and enterprise and a layered
// "api" policy, among others.
func DefaultYAML() []byte { return []byte(defaultYAML) }

// Default returns the built-in example configuration, parsed.
func Default() (*Config, error) { return Parse([]byte(defaultYAML), DefaultName) }
