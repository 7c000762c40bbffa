package config_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestRedisPasswordOutsideTheURL: a password given apart from the URL (read
// from a file by serve) authenticates; a password in both places is
// refused rather than one silently winning.
func TestRedisPasswordOutsideTheURL(t *testing.T) {
	const pw = "pw-from-a-file-0123456789"
	rs := redistest.Start(t)
	ctx := context.Background()
	// redistest waits for an unauthenticated PING: require the password
	// once the server runs, and drop it again before the server stops.
	admin := rs.Client(t)
	if err := admin.ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr, Password: pw})
		defer c.Close()
		_ = c.ConfigSet(context.Background(), "requirepass", "").Err()
	})
	c, err := config.Redis{URL: "redis://" + rs.Addr + "/0", Password: pw}.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password apart from the URL: %v", err)
	}
	bare, err := config.Redis{URL: "redis://" + rs.Addr}.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if err := bare.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without a password: %v, want NOAUTH", err)
	}
	for _, url := range []string{"redis://:other@" + rs.Addr, "redis-cluster://:other@" + rs.Addr, "redis-sentinel://:other@" + rs.Addr + "?master=m"} {
		if _, err := (config.Redis{URL: url, Password: pw}).Client(); !errors.Is(err, config.ErrRedisURL) || strings.Contains(err.Error(), pw) {
			t.Fatalf("%s and a separate password: %v, want ErrRedisURL without the password", url, err)
		}
	}
}

// TestRedisURLSecretsNeverInMessages: a password in a URL's query string
// (go-redis takes it only in the user part, so such a URL is refused) or
// in an unparsable URL is hidden in the refusal and in String, as the
// user part's password always was: the error reaches the log and stderr.
func TestRedisURLSecretsNeverInMessages(t *testing.T) {
	const secret = "S3cretPassw0rd"
	for _, u := range []string{
		"redis://127.0.0.1:6379/0?password=" + secret,
		"redis://:" + secret + "@127.0.0.1:6379/0?bogus=1",
		"redis://127.0.0.1:6379/0?pasword=" + secret,
		"redis-sentinel://127.0.0.1:26379/0?master=m&password=" + secret,
		"redis-cluster://127.0.0.1:7000?password=" + secret,
		"redis://127.0.0.1:6379/0?password=" + secret + "%zz",
		"redis://:" + secret + "%zz@127.0.0.1:6379/0",
		"nosuchscheme://:" + secret + "@127.0.0.1:6379/0",
		"user:" + secret + "@127.0.0.1:6379/0", // no scheme: "user" read as one
		":" + secret + "@127.0.0.1:6379",
	} {
		r := config.Redis{URL: u}
		if s := r.String(); strings.Contains(s, secret) {
			t.Errorf("String() of %q = %q", u, s)
		}
		c, err := r.Client()
		if err == nil {
			c.Close() // go-redis reads no query it cannot parse
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%q: error shows the password: %v", u, err)
		}
	}
	// The parameters that are not secrets stay readable.
	if s := (config.Redis{URL: "redis-sentinel://127.0.0.1:26379/0?master=mymaster"}).String(); !strings.Contains(s, "master=mymaster") {
		t.Errorf("String() hides the master name: %q", s)
	}
}

// TestRedisSentinelPassword: behind sentinels that require a password of
// their own, the client and its Follower reach them with SentinelPassword
// (the data nodes' Password alone got "all sentinels ... unreachable:
// NOAUTH", for ever); without it the error says where the sentinels'
// password is given, and Sentinels hands it to the tools that ask them
// (doctor). Sentinel credentials without sentinels are refused.
func TestRedisSentinelPassword(t *testing.T) {
	const pw = "sentinel-and-data-pw-0123"
	s := redistest.StartSentinel(t)
	s.RequirePass(t, pw)
	url := "redis-sentinel://" + strings.Join(s.SentinelAddrs, ",") + "/0?master=" + s.MasterName
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, follow, err := config.Redis{URL: url, Password: pw, SentinelPassword: pw}.FollowingClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the sentinels' password: %v", err)
	}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); follow.Run(fctx, nil) }()
	for follow.Primary() == "" && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	if got := follow.Primary(); got != s.Primary.Addr {
		t.Fatalf("the Follower's primary: %q, want %s (the sentinels answer it with their password only)", got, s.Primary.Addr)
	}

	bare, err := config.Redis{URL: url, Password: pw}.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	err = bare.Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "NOAUTH") || !strings.Contains(err.Error(), "--redis-sentinel-password-file") {
		t.Fatalf("PING without the sentinels' password: %v, want NOAUTH and where to give it", err)
	}

	st, ok, err := config.Redis{URL: url, SentinelUsername: "default", SentinelPassword: pw}.Sentinels()
	if !ok || err != nil || st.Username != "default" || st.Password != pw {
		t.Fatalf("Sentinels() = %+v, %v, %v; want the sentinels' user and password", st, ok, err)
	}

	for _, r := range []config.Redis{
		{URL: "redis://127.0.0.1:6390/0", SentinelPassword: pw},
		{URL: "redis-cluster://127.0.0.1:7000", SentinelPassword: pw},
		{ClusterAddrs: []string{"127.0.0.1:7000"}, SentinelUsername: "u"},
	} {
		if _, err := r.Client(); !errors.Is(err, config.ErrRedisURL) || strings.Contains(err.Error(), pw) {
			t.Errorf("%s with sentinel credentials: %v, want ErrRedisURL without the password", r, err)
		}
	}
}
