package redact

import "testing"

func TestKeys(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis: connection refused", "redis: connection refused"},
		{"key fg:api:fw:{ruser42} holds a value", "key fg:api:fw:{…} holds a value"},
		{"keys fg:a:fw:{r1.2.3.4}, fg:b:sw:{hAbC} failed", "keys fg:a:fw:{…}, fg:b:sw:{…} failed"},
		{"fg:api.monthly:qt:{ru1}:m2026-12", "fg:api.monthly:qt:{…}:m2026-12"},
		{"truncated fg:a:fw:{rsecr", "truncated fg:a:fw:{…"},
		{"{}", "{…}"},
		{"", ""},
	} {
		if got := Keys(tc.in); got != tc.want {
			t.Errorf("Keys(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
