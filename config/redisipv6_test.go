package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
)

// TestRedisURLIPv6Hosts: the host list of a sentinel or cluster URL takes
// bracketed IPv6 addresses, alone or among names and IPv4 addresses, as
// --redis-sentinel and --redis-cluster do. An outside walk on IPv6 got
// `"redis-sentinel://[::1]:24011,[::1]:24012/0?master=mymaster": invalid
// IP-literal` (url.Parse refuses such a list), and the message hid the
// master's name as well as the password.
func TestRedisURLIPv6Hosts(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		for _, tc := range []struct {
			url  string
			want []string
		}{
			{"redis-cluster://[::1]:24101,[::1]:24102", []string{"[::1]:24101", "[::1]:24102"}},
			{"rediss-cluster://u:pw@[::1]:24101,[::1]:24102/0", []string{"[::1]:24101", "[::1]:24102"}},
			{"redis-cluster://a:1,[::1]:2,127.0.0.1:3", []string{"a:1", "[::1]:2", "127.0.0.1:3"}},
			{"redis-cluster://[fe80::1%25eth0]:7000", []string{"[fe80::1%eth0]:7000"}}, // as url.Parse reads a host
		} {
			c, err := config.Redis{URL: tc.url}.Client()
			if err != nil {
				t.Errorf("%s: %v", tc.url, err)
				continue
			}
			cc, ok := c.(*redis.ClusterClient)
			if !ok {
				t.Errorf("%s: %T, want a cluster client", tc.url, c)
			} else if got := cc.Options().Addrs; !slices.Equal(got, tc.want) {
				t.Errorf("%s: addresses %q, want %q", tc.url, got, tc.want)
			}
			_ = c.Close()
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		for _, tc := range []struct {
			url  string
			want []string
		}{
			{"redis-sentinel://[::1]:24011,[::1]:24012/0?master=mymaster", []string{"[::1]:24011", "[::1]:24012"}},
			{"rediss-sentinel://:pw@[::1]:24011,h:24012/2?master=mymaster", []string{"[::1]:24011", "h:24012"}},
		} {
			r := config.Redis{URL: tc.url}
			c, err := r.Client()
			if err != nil {
				t.Errorf("%s: %v", tc.url, err)
				continue
			}
			_ = c.Close()
			st, ok, err := r.Sentinels()
			if !ok || err != nil || !slices.Equal(st.Addrs, tc.want) || st.Master != "mymaster" {
				t.Errorf("%s: Sentinels() = %q master %q, %v, %v; want %q master mymaster", tc.url, st.Addrs, st.Master, ok, err, tc.want)
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		const secret = "S3cretPassw0rd"
		for _, tc := range []struct{ url, want string }{
			{"redis-sentinel://::1:24011,::1:24012/0?master=m", `address "::1:24011" is not host:port: put an IPv6 address in brackets: [::1]:24011`},
			{"redis-cluster://a:1,::1:2", `address "::1:2" is not host:port: put an IPv6 address in brackets: [::1]:2`},
			{"redis-cluster://[::1]:1,[::1:2", `address "[::1:2" is not host:port`},
			{"redis-cluster://[::1]:1,[::1]", `address "[::1]" is not host:port`},
			{"redis-cluster://[::1]:1,[::1]:0", `address "[::1]:0" has an invalid port`},
			{"redis-cluster://:" + secret + "@[::1]:1,[::1]:99999", `address "[::1]:99999" has an invalid port`},
			{"redis-cluster://[::1]:1,bad%zzhost:2", `invalid URL escape "%zz"`},
			{"redis-cluster://[::1]:1,bad host:2", `invalid character " " in host name`},
			{"redis-cluster://[::1]:1,[::1]:2/3", "only database 0"},
			{"redis-sentinel://:" + secret + "@[::1]:1,[::1]:2/x?master=m", `database "x" is not a number`},
			{"redis-sentinel://[::1]:1,[::1]:2/0?master=m&x=" + secret, `unknown URL parameter "x"`},
			{"redis-sentinel://:" + secret + "@[::1]:1,[::1]:2/0", `"redis-sentinel://:xxxxx@[::1]:1,[::1]:2/0": a redis-sentinel URL needs ?master=NAME`},
		} {
			_, err := config.Redis{URL: tc.url}.Client()
			if !errors.Is(err, config.ErrRedisURL) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.url, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("%s: error shows the password: %v", tc.url, err)
			}
		}
	})
	// The review: a password holding an unescaped "/", "?", "#" (or "["
	// with it) ends the authority early, so what looked like the host
	// list was the password's start, and the message and String()
	// quoted it (`address ":ab:cd" is not host:port`).
	t.Run("unescaped password", func(t *testing.T) {
		for _, url := range []string{
			"redis-sentinel://:S3c:rEt:Pq/zZ@127.0.0.1:29001?master=m",
			"redis-cluster://default:S3c:rEt:Pq/zZ@h:7000",
			"redis-sentinel://u:S3c:rEt[Pq/zZ@h1:26379?master=m",
			"redis-cluster://u:S3c:rEt:Pq?zZ@h:7000",
			"redis-cluster://u:S3c:rEt:Pq#zZ@h:7000",
		} {
			r := config.Redis{URL: url}
			_, err := r.Client()
			if !errors.Is(err, config.ErrRedisURL) {
				t.Errorf("%s: %v, want ErrRedisURL", url, err)
			}
			for _, part := range []string{"S3c", "rEt", "Pq", "zZ"} {
				if err != nil && strings.Contains(err.Error(), part) {
					t.Errorf("%s: error shows part of the password: %v", url, err)
				}
				if s := r.String(); strings.Contains(s, part) {
					t.Errorf("%s: String() shows part of the password: %s", url, s)
				}
			}
		}
	})
	t.Run("messages", func(t *testing.T) {
		const secret = "S3cretPassw0rd"
		r := config.Redis{URL: "redis-sentinel://u:" + secret + "@[::1]:24011,[::1]:24012/0?master=mymaster&password=" + secret}
		want := "redis-sentinel://u:xxxxx@[::1]:24011,[::1]:24012/0?master=mymaster&password=xxxxx"
		if got := r.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
		r = config.Redis{URL: "redis-cluster://[fe80::1%25eth0]:7000,[::1]:7001"}
		if got := r.String(); got != r.URL {
			t.Errorf("String() = %q, want %q", got, r.URL)
		}
	})
}
