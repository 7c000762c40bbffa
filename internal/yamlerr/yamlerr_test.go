package yamlerr

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"gopkg.in/yaml.v3"
)

// decodeErr returns the first error decoding data's documents gives.
func decodeErr(t *testing.T, data string) error {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader([]byte(data)))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			t.Fatalf("%q parses", data)
		}
		if err != nil {
			return err
		}
	}
}

func TestSyntax(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		line       int
		msg        string
	}{
		{"unclosed list", "policies: [\n", 1, "YAML syntax: did not find expected node content"},
		{"indentation", "version: 1\npolicies:\n  - name: api\n    layers:\n      - name: user\n     algorithm: gcra\n", 6,
			"YAML syntax: did not find expected key (check the indentation; the block starts at line 2)"},
		{"indentation in a later document", "domain: a\n---\ndomain: b\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n     requests_per_unit: 1\n", 8,
			"YAML syntax: did not find expected key (check the indentation; the block starts at line 4)"},
		{"tab", "a:\n\tb: 1\n", 2, "YAML syntax: found character that cannot start any token"},
		// A flow mapping or list left open: yaml.v3 gives the line before
		// the one it starts on (its context mark counts from 0; newuser4
		// walk: "bad5.yaml:4" for a '{' on line 5).
		{"unclosed flow mapping", "version: \"1\"\npolicies:\n  - name: a\n    layers:\n      - {name: b, algorithm: fixed_window, limit: 3, window: 1m, dimension: user\n      - {name: c, algorithm: fixed_window, limit: 3, window: 1m, dimension: user}\n", 5,
			"YAML syntax: did not find expected ',' or '}'"},
		{"unclosed flow mapping on line 2", "version: \"1\"\npolicies: [{name: a, layers: []\n  , {name: b}]\nx: 1\n", 2,
			"YAML syntax: did not find expected ',' or '}'"},
		{"unclosed flow list", "a: 1\nb:\n  c: [1, 2\n  d: 3\n", 3, "YAML syntax: did not find expected ',' or ']'"},
		{"unclosed flow mapping on line 1", "{a: 1\nb: 2\n", 1, "YAML syntax: did not find expected ',' or '}'"},
		{"multi-line flow mapping", "a: 1\nb: {c: 1,\n  d: 2,\n  e: 3\nf: 4\n", 2, "YAML syntax: did not find expected ',' or '}'"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			line, msg := Syntax([]byte(tt.data), decodeErr(t, tt.data))
			if line != tt.line || msg != tt.msg {
				t.Errorf("Syntax = %d, %q; want %d, %q", line, msg, tt.line, tt.msg)
			}
		})
	}
}

// TestSyntaxNoLine: an error without yaml.v3's line prefix keeps its text.
func TestSyntaxNoLine(t *testing.T) {
	line, msg := Syntax(nil, errors.New("yaml: control characters are not allowed"))
	if line != 0 || msg != "YAML syntax: control characters are not allowed" {
		t.Errorf("Syntax = %d, %q", line, msg)
	}
}

func TestDescribe(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("a: &x {b: 1}\nc: [1]\nd:\ne: '7'\nf: *x\n"), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Content[0].Content
	for i, want := range []string{"a mapping", "a list", "null", `"7"`, "something else"} {
		if got := Describe(m[2*i+1]); got != want {
			t.Errorf("Describe(%s) = %q, want %q", m[2*i].Value, got, want)
		}
	}
	if got := Describe(&doc); got != "something else" {
		t.Errorf("Describe(document) = %q", got)
	}
}
