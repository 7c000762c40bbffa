package server

import (
	"net/netip"
	"strings"
	"testing"
)

// TestAllowsHost: a Host, port aside and in any case, is allowed when it
// is a listed name, a name under a listed wildcard, localhost or an IP
// address; any other name (a rebound attacker.example) is not, and
// without a list every Host is.
func TestAllowsHost(t *testing.T) {
	a, err := newAllowedHosts([]string{"floodgate.internal", "*.Example.COM"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"":                           true, // HTTP/1.0 without Host: no browser
		"floodgate.internal":         true,
		"floodgate.internal:8080":    true,
		"FLOODGATE.internal:8080":    true,
		"floodgate.internal.:8080":   true,
		"api.example.com":            true,
		"a.b.example.com:443":        true,
		"localhost":                  true,
		"LocalHost:30020":            true,
		"localhost.:30020":           true,
		"127.0.0.1":                  true,
		"127.0.0.1:30020":            true,
		"10.0.0.255:8080":            true,
		"0.0.0.0:1":                  true,
		"[::1]":                      true,
		"[::1]:30020":                true,
		"[fe80::1%25eth0]:8080":      true,
		"[::ffff:127.0.0.1]:8080":    true,
		"attacker.example:30020":     false,
		"attacker.example":           false,
		"example.com":                false, // the wildcard is for names under it
		"evilexample.com":            false,
		"floodgate.internal.evil":    false,
		"evil.floodgate.internal":    false,
		"localhost.attacker.example": false,
		"127.0.0.1.attacker.example": false,
		"127.0.0.01":                 false,
		"127.0.0":                    false,
		"256.0.0.1":                  false,
		"1.2.3.4.5":                  false,
		"[127.0.0.1]:8080":           false,
		"[::1":                       false,
		"[::1]x":                     false,
		"[attacker.example]":         false,
		"::1":                        false, // IPv6 without brackets: no client sends it
	} {
		if got := allowsHost(a, host); got != want {
			t.Errorf("allowsHost(%q) = %v, want %v", host, got, want)
		}
		if got := allowsHost(a, []byte(host)); got != want {
			t.Errorf("allowsHost([]byte %q) = %v, want %v", host, got, want)
		}
		if !allowsHost(nil, host) {
			t.Errorf("allowsHost(nil, %q) = false, want true", host)
		}
	}
}

// FuzzAllowsHost: the string and byte forms agree, and every IPv4 address
// netip reads, with or without a port, is allowed.
func FuzzAllowsHost(f *testing.F) {
	for _, s := range []string{"floodgate.internal:8080", "[::1]:1", "127.0.0.1", "1.2.3.04", "attacker.example", "x.example.com."} {
		f.Add(s)
	}
	a, err := newAllowedHosts([]string{"floodgate.internal", "*.example.com"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got := allowsHost(a, host)
		if b := allowsHost(a, []byte(host)); b != got {
			t.Fatalf("allowsHost(%q): %v on a string, %v on bytes", host, got, b)
		}
		name, _, _ := strings.Cut(host, ":")
		if ip, err := netip.ParseAddr(name); err == nil && ip.Is4() && !got {
			t.Fatalf("allowsHost(%q) = false for an IPv4 address", host)
		}
		if isIPv4(host) {
			if ip, err := netip.ParseAddr(host); err != nil || !ip.Is4() {
				t.Fatalf("isIPv4(%q) but netip.ParseAddr: %v", host, err)
			}
		}
	})
}

// BenchmarkAllowsHost measures the Host check of a request on fasthttp's
// native path, for a Host allowed by name (the last listed), by wildcard,
// as an IPv4 address, and refused.
func BenchmarkAllowsHost(b *testing.B) {
	a, err := newAllowedHosts([]string{"floodgate.example.com", "*.floodgate.example.net", "floodgate.internal"})
	if err != nil {
		b.Fatal(err)
	}
	for _, host := range []string{"floodgate.internal:8080", "eu.floodgate.example.net", "10.1.2.3:8080", "attacker.example:30020"} {
		b.Run(host, func(b *testing.B) {
			h := []byte(host)
			b.ReportAllocs()
			for b.Loop() {
				allowsHost(a, h)
			}
		})
	}
}
