package loginguard

import (
	"testing"
	"unicode"
	"unicode/utf8"
)

// cherokeeSpellings returns every case variant of name, a string of
// Cherokee capitals: 2^k for k letters.
func cherokeeSpellings(name string) []string {
	out := []string{""}
	for _, r := range name {
		var next []string
		for _, s := range out {
			next = append(next, s+string(r), s+string(unicode.ToLower(r)))
		}
		out = next
	}
	return out
}

// TestNormalizeAccountCherokee: every case variant of a Cherokee name
// normalises to one form, the capitals Unicode's case folding maps
// Cherokee to. cases.Fold swaps Cherokee's cases (golang/go#46101):
// "ᏣᎳᎩ" normalised to "ꮳꮃꭹ" and "ꮳꮃꭹ" to "ᏣᎳᎩ", so each of the 8
// spellings of a 3-letter name had a budget of its own.
func TestNormalizeAccountCherokee(t *testing.T) {
	for _, name := range []string{"ᏣᎳᎩ", "ᎠᏴᏵ", "\u13f0\u13f5 \u13a0"} {
		spellings := cherokeeSpellings(name)
		if len(spellings) < 8 {
			t.Fatalf("%q: %d spellings", name, len(spellings))
		}
		for _, s := range spellings {
			if got, err := NormalizeAccount(s); err != nil || got != name {
				t.Errorf("NormalizeAccount(%+q) = %+q, %v; want %+q", s, got, err, name)
			}
		}
	}
	// Every Cherokee letter, small or capital, folds to its capital.
	for r := rune(0x13a0); r <= 0xabbf; r++ {
		if !unicode.Is(unicode.Cherokee, r) || !unicode.IsLetter(r) {
			continue
		}
		want := string(unicode.ToUpper(r))
		if got, err := NormalizeAccount(string(r)); err != nil || got != want {
			t.Errorf("NormalizeAccount(%U) = %+q, %v; want %+q", r, got, err, want)
		}
	}
}

// checkIdempotent fails t unless a name NormalizeAccount accepts is its
// own normal form: the form an application stores (and an admin unlocks
// by) must reach the same counters as the spelling it came from.
func checkIdempotent(t *testing.T, in string) {
	t.Helper()
	n, err := NormalizeAccount(in)
	if err != nil {
		return
	}
	if n2, err := NormalizeAccount(n); err != nil || n2 != n {
		t.Errorf("NormalizeAccount(%+q) = %+q, but NormalizeAccount(%+q) = %+q, %v", in, n, n, n2, err)
	}
}

// TestNormalizeAccountIdempotent: NormalizeAccount(NormalizeAccount(x))
// is NormalizeAccount(x) for every code point, alone, after a letter,
// before an accent and after a capital sigma; and every code point
// normalises as the others of its simple case orbit do (the code points
// skipScan leaves out pass through unchanged). Cherokee broke
// both (172 code points).
func TestNormalizeAccountIdempotent(t *testing.T) {
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) || skipScan(r) {
			continue
		}
		c := string(r)
		for _, s := range []string{c, "a" + c, c + "\u0301", "\u03a3" + c} {
			checkIdempotent(t, s)
		}
		n, err := NormalizeAccount(c)
		if err != nil {
			continue
		}
		for o := unicode.SimpleFold(r); o != r; o = unicode.SimpleFold(o) {
			if m, err := NormalizeAccount(string(o)); err != nil || m != n {
				t.Errorf("NormalizeAccount(%U) = %+q, but NormalizeAccount(%U) = %+q, %v", r, n, o, m, err)
			}
		}
	}
}

// skipScan reports whether r is a code point NormalizeAccount passes
// through untouched for certain, left out of the scan for speed:
// unassigned, private use, or a unified CJK ideograph (no case, no
// decomposition; the compatibility ideographs are scanned).
func skipScan(r rune) bool {
	return unicode.In(r, unicode.Cn, unicode.Co, unicode.Unified_Ideograph)
}

// FuzzNormalizeAccount: NormalizeAccount is idempotent, and what it
// accepts it returns as valid, non-empty UTF-8.
func FuzzNormalizeAccount(f *testing.F) {
	for _, s := range []string{"alice", " Alice\u200b", "ＡＬＩＣＥ", "Straße", "ΣΊΣΥΦΟΣ", "ᏣᎳᎩ", "ꮳꮃꭹ", "Ᏸᏸ", "e\u0301", "ﬁ", "İı", "\u0345\u0399", "\xff\xfe", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, err := NormalizeAccount(in)
		if err != nil {
			return
		}
		if n == "" || !utf8.ValidString(n) {
			t.Fatalf("NormalizeAccount(%+q) = %+q", in, n)
		}
		checkIdempotent(t, in)
	})
}
