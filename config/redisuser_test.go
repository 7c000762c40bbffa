package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
)

// TestRedisUsernameConflicts: a user name given apart from the URL
// (--redis-username) is refused at start when the URL names one too, or
// when no password goes with it; it is taken by every form without a
// user (sentineltls walk: the flag form of Sentinel could not name one).
func TestRedisUsernameConflicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    config.Redis
		want string // "" for no error
	}{
		{"URL user and Username", config.Redis{URL: "redis://app@127.0.0.1:1", Username: "other", Password: "pw"}, "keep only one"},
		{"sentinel URL user and Username", config.Redis{URL: "redis-sentinel://app@127.0.0.1:1?master=m", Username: "other", Password: "pw"}, "keep only one"},
		{"Username without a password", config.Redis{SentinelAddrs: []string{"127.0.0.1:1"}, SentinelMaster: "m", Username: "app"}, "without a password"},
		{"sentinel addresses", config.Redis{SentinelAddrs: []string{"127.0.0.1:1"}, SentinelMaster: "m", Username: "app", Password: "pw"}, ""},
		{"cluster addresses", config.Redis{ClusterAddrs: []string{"127.0.0.1:1"}, Username: "app", Password: "pw"}, ""},
		{"URL without a user", config.Redis{URL: "redis://:pw@127.0.0.1:1", Username: "app"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.r.Client()
			if c != nil {
				defer c.Close()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Client: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, config.ErrRedisURL) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Client: %v, want an ErrRedisURL saying %q", err, tc.want)
			}
		})
	}
}
