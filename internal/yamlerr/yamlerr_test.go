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
