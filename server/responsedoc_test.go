package server_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/server"
)

// TestResponseFieldsDocumented: every field of the quota and lease
// answers has its row (quota operations, acquire) or its mention
// (release, renew) in docs/quotas.md, and every row names a field the
// answer has. The outside walk found "unmatched", renew's body, and the
// fields a denied acquire leaves out documented nowhere.
func TestResponseFieldsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/quotas.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	section := func(title string) string {
		_, s, ok := strings.Cut(doc, "\n"+title+"\n")
		if !ok {
			t.Fatalf("docs/quotas.md has no %q", title)
		}
		if end := strings.Index(s, "\n#"); end >= 0 {
			s = s[:end]
		}
		return s
	}
	quotaSec, leaseSec := section("### Quota operations"), section("### Leases")
	acquireSec, rest, _ := strings.Cut(leaseSec, "/v1/concurrency/release")
	for _, tc := range []struct {
		what  string
		v     any
		text  string
		table bool // the fields are the rows of a table
	}{
		{"QuotaResponse", server.QuotaResponse{}, quotaSec, true},
		{"AcquireResponse", server.AcquireResponse{}, acquireSec, true},
		{"ReleaseResponse", server.ReleaseResponse{}, rest, false},
		{"RenewResponse", server.RenewResponse{}, rest, false},
	} {
		typ := reflect.TypeOf(tc.v)
		fields := map[string]bool{}
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			fields[name] = true
			mark := "`" + name + "`"
			if tc.table {
				mark = "| " + mark + " |"
			}
			if !strings.Contains(tc.text, mark) {
				t.Errorf("%s field %q is not documented in docs/quotas.md (%s)", tc.what, name, mark)
			}
		}
		if !tc.table {
			continue
		}
		for _, line := range strings.Split(tc.text, "\n") {
			if row, ok := strings.CutPrefix(line, "| `"); ok {
				if name, _, _ := strings.Cut(row, "`"); !fields[name] {
					t.Errorf("docs/quotas.md documents %q, which %s does not have", name, tc.what)
				}
			}
		}
	}
}
