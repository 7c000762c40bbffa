package doctor

import "testing"

// TestNodeAddrIPv6: the addresses of the primary and replicas a sentinel
// describes are written host:port with an IPv6 address in brackets. An
// outside walk on IPv6 read "[::1]:24011: mymaster at ::1:24001 flags
// master".
func TestNodeAddrIPv6(t *testing.T) {
	for _, tc := range []struct{ ip, port, want string }{
		{"::1", "24001", "[::1]:24001"},
		{"fd00::a:1", "6379", "[fd00::a:1]:6379"},
		{"127.0.0.1", "6380", "127.0.0.1:6380"},
		{"redis-0.example", "6380", "redis-0.example:6380"},
	} {
		if got := nodeAddr(map[string]string{"ip": tc.ip, "port": tc.port, "flags": "master"}); got != tc.want {
			t.Errorf("nodeAddr(%s, %s) = %q, want %q", tc.ip, tc.port, got, tc.want)
		}
	}
}
