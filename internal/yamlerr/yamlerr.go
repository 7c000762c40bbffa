// Package yamlerr words the errors of YAML written by people: it turns the
// syntax errors of gopkg.in/yaml.v3 into a line number and a message, and
// names a node a value was wrong for ("got a list"). It is the one copy of
// both for the packages that parse such files (config, envoyrls).
package yamlerr

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// lineOf matches yaml.v3's "yaml: line N: message".
var lineOf = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxSearch bounds the prefixes firstBadLine parses.
const maxSearch = 2000

// Syntax returns where the syntax error err, which yaml.v3 returned for
// data, is (a 1-based line, 0 when yaml.v3 gives none) and the message to
// show, which starts with "YAML syntax: ".
//
// yaml.v3 reports some errors, such as a key indented wrongly, at the line
// where the enclosing block starts (often line 1 or 2), not where the
// mistake is, and a flow mapping or list left open at the line before it. For those, Syntax returns the first later line at which the
// input, cut after that line, no longer parses, and the message names the
// line yaml.v3 gave. That search parses at most 2000 prefixes, so it costs
// time on the error path only.
func Syntax(data []byte, err error) (line int, msg string) {
	text := err.Error()
	m := lineOf.FindStringSubmatch(text)
	if m == nil {
		return 0, "YAML syntax: " + strings.TrimPrefix(text, "yaml: ")
	}
	line, _ = strconv.Atoi(m[1])
	indent := strings.HasPrefix(m[2], "did not find expected key") || strings.HasPrefix(m[2], "did not find expected '-' indicator")
	if bad := firstBadLine(data, line); indent && bad > line {
		return bad, fmt.Sprintf("YAML syntax: %s (check the indentation; the block starts at line %d)", m[2], line)
	}
	// A flow mapping or list left open ("did not find expected ',' or
	// '}'") is reported at the line before the one it starts on (the
	// mark yaml.v3 gives counts lines from 0 there, but for the first
	// line): the first line from the one given at which the input stops
	// parsing is where it starts.
	if strings.HasPrefix(m[2], "did not find expected ',' or ") {
		if bad := firstBadLine(data, line-1); bad > 0 {
			return bad, "YAML syntax: " + m[2]
		}
	}
	return line, "YAML syntax: " + m[2]
}

// firstBadLine returns the first line after from at which data, cut after
// that line, no longer parses, or 0. It reads every document of each
// prefix, so a mistake in a later document ("---") is found too.
func firstBadLine(data []byte, from int) int {
	end := 0
	for i, l := range bytes.SplitAfter(data, []byte("\n")) {
		if len(l) == 0 {
			break
		}
		end += len(l)
		n := i + 1
		if n <= from {
			continue
		}
		if n > from+maxSearch {
			return 0
		}
		if !parses(data[:end]) {
			return n
		}
	}
	return 0
}

// parses reports whether every YAML document in data parses.
func parses(data []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// Describe names n for a message such as "limit must be an integer, got
// %s": "a mapping", "a list", "null", a scalar's value quoted, or
// "something else" (an alias or a document node).
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}
