package floodgate_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
)

func TestEncodeIdentity(t *testing.T) {
	tests := []struct {
		name, id, want string
	}{
		{"readable", "user42", "ruser42"},
		{"email", "a.b+c@example.com", "ra.b+c@example.com"},
		{"empty", "", "r"},
		{"colon is hashed", "a:b", "h" + hashPrefix("a:b")},
		{"brace is hashed", "{x}", "h" + hashPrefix("{x}")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := floodgate.EncodeIdentity(tt.id); got != tt.want {
				t.Errorf("EncodeIdentity(%q) = %q, want %q", tt.id, got, tt.want)
			}
		})
	}
}

func hashPrefix(id string) string {
	e := floodgate.EncodeIdentity(id)
	return e[1:]
}

func TestKeyShape(t *testing.T) {
	p, err := floodgate.NewSlidingWindow("api", 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := floodgate.Key("fg", p, "user42"), "fg:api:sw:{ruser42}"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	huge := strings.Repeat("x", 5<<20)
	k := floodgate.Key("fg", p, huge)
	if len(k) > 128 {
		t.Errorf("key for a 5 MiB identity is %d bytes", len(k))
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, ok := range []string{"fg", "app:rl", "a.b-c_d"} {
		if err := floodgate.ValidatePrefix(ok); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "{x}", "a b", strings.Repeat("a", 65), "a\n"} {
		if err := floodgate.ValidatePrefix(bad); err == nil {
			t.Errorf("ValidatePrefix(%q) = nil", bad)
		}
	}
	// An error quotes a long input clipped, not whole (a 1 MiB prefix
	// made a 1 MiB error).
	huge := strings.Repeat("x", 1<<20)
	_, policyErr := floodgate.NewFixedWindow(huge, 1, time.Second)
	for name, err := range map[string]error{
		"prefix":      floodgate.ValidatePrefix(huge),
		"policy name": policyErr,
	} {
		if err == nil || len(err.Error()) > 400 || !strings.Contains(err.Error(), "...") {
			t.Errorf("%s of 1 MiB: error of %d bytes, want it clipped: %.200v", name, len(fmt.Sprint(err)), err)
		}
	}
}

// FuzzKey checks that no identity escapes its namespace or picks its slot:
// the key has exactly the fixed shape, the hash tag is the encoded identity,
// the key is short, and distinct identities get distinct keys.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"", "user", "a:b", "{", "}", "{evil}", "x}:{y", "\n", "\x00", strings.Repeat("z", 1000), "r", "habc", "ruser"} {
		f.Add(s, "user")
	}
	p, _ := floodgate.NewFixedWindow("fz", 1, time.Second)
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := floodgate.Key("fg", p, a), floodgate.Key("fg", p, b)
		for _, k := range []string{ka, kb} {
			if !strings.HasPrefix(k, "fg:fz:fw:{") || !strings.HasSuffix(k, "}") {
				t.Fatalf("key %q escapes its namespace", k)
			}
			inner := k[len("fg:fz:fw:{") : len(k)-1]
			if strings.ContainsAny(inner, "{}:\n\x00 ") {
				t.Fatalf("key %q has unsafe bytes in its tag", k)
			}
			if algo.HashTag(k) != inner {
				t.Fatalf("key %q: hash tag %q, want %q", k, algo.HashTag(k), inner)
			}
			if len(k) > 10+66 {
				t.Fatalf("key %q too long (%d)", k, len(k))
			}
		}
		if (a == b) != (ka == kb) {
			t.Fatalf("identities %q and %q: keys %q and %q", a, b, ka, kb)
		}
	})
}
