package envoycompat

import (
	"math"
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestSettingsDefaultsAreTheirs(t *testing.T) {
	s, err := FromEnv(env("PORT=", "REDIS_URL="))
	if err != nil {
		t.Fatal(err)
	}
	h, d, g := s.Addresses()
	if h != "0.0.0.0:8080" || d != "0.0.0.0:6070" || g != "0.0.0.0:8081" {
		t.Errorf("addresses %s %s %s", h, d, g)
	}
	if s.Redis.URL != "/var/run/nutcracker/ratelimit.sock" || s.Redis.SocketType != "unix" || s.Redis.Type != "SINGLE" || s.Redis.PoolSize != 10 || s.Redis.Timeout != 10*time.Second {
		t.Errorf("redis %+v", s.Redis)
	}
	if s.RuntimeRoot != "/srv/runtime_data/current" || s.RuntimeAppDirectory != "config" || !s.RuntimeWatchRoot || s.RuntimeIgnoreDotFiles {
		t.Errorf("runtime %+v", s.RuntimeOf())
	}
	o := s.Options()
	if s.GrpcReflection {
		t.Error("gRPC reflection on by default; theirs never registers it")
	}
	if o.NearLimitRatio != 0.8 || o.ExpirationJitterMax != 300*time.Second || o.ResponseHeaders || o.LimitHeader != "RateLimit-Limit" || o.StopIncrementWhenOverLimit || o.GlobalShadowMode {
		t.Errorf("options %+v", o)
	}
}

func TestSettingsRead(t *testing.T) {
	s, err := FromEnv(env("GRPC_UDS=/tmp/rl.sock", "REDIS_TYPE=cluster", "REDIS_URL=a:1,b:2", "SHADOW_MODE=true",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=1", "LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_RESET_HEADER=X-Reset",
		"NEAR_LIMIT_RATIO=0.5", "LOCAL_CACHE_SIZE_IN_BYTES=1024", "REDIS_TIMEOUT=250ms", "MERGE_DOMAIN_CONFIG=true"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, g := s.Addresses(); g != "/tmp/rl.sock" {
		t.Errorf("grpc address %s", g)
	}
	o := s.Options()
	if !o.GlobalShadowMode || !o.StopIncrementWhenOverLimit || !o.ResponseHeaders || o.ResetHeader != "X-Reset" || o.NearLimitRatio != 0.5 || o.LocalCacheBytes != MinLocalCacheBytes {
		t.Errorf("options %+v", o)
	}
	if s.Redis.Type != "cluster" || s.Redis.Timeout != 250*time.Millisecond || !s.MergeDomainConfig {
		t.Errorf("settings %+v", s)
	}
	if s, err := FromEnv(env("FLOODGATE_GRPC_REFLECTION=true")); err != nil || !s.GrpcReflection {
		t.Errorf("FLOODGATE_GRPC_REFLECTION=true: reflection %v, %v", s.GrpcReflection, err)
	}
}

// TestSettingsTakenAsTheirs: values envoyproxy/ratelimit starts with,
// though it reads them in its own way, start this service too, read the
// same way and noted in Adjusted; they stopped the start before, so that a
// deployment changed only in its image crash-looped (outside walk).
func TestSettingsTakenAsTheirs(t *testing.T) {
	for _, tc := range []struct {
		kv   []string
		want string
		got  func(Settings) bool
	}{
		{[]string{"NEAR_LIMIT_RATIO=1.5"}, "near_limit is never counted", func(s Settings) bool { return s.NearLimitRatio == 1.5 }},
		{[]string{"NEAR_LIMIT_RATIO=-1"}, "near_limit is never counted", func(s Settings) bool { return s.NearLimitRatio == -1 }},
		{[]string{"EXPIRATION_JITTER_MAX_SECONDS=-1"}, "no expiration jitter", func(s Settings) bool { return s.Options().ExpirationJitterMax == 0 }},
		{[]string{"LOCAL_CACHE_SIZE_IN_BYTES=-5"}, "holds 524288 bytes", func(s Settings) bool { return s.Options().LocalCacheBytes == MinLocalCacheBytes }},
		{[]string{"LOCAL_CACHE_SIZE_IN_BYTES=100"}, "holds 524288 bytes", func(s Settings) bool { return s.Options().LocalCacheBytes == MinLocalCacheBytes }},
		{[]string{"REDIS_POOL_SIZE=0"}, "REDIS_POOL_SIZE=0: a pool of 4", func(s Settings) bool { return s.Redis.PoolSize == 4 }},
		{[]string{"REDIS_PERSECOND=true", "REDIS_PERSECOND_POOL_SIZE=0"}, "REDIS_PERSECOND_POOL_SIZE=0: a pool of 4", func(s Settings) bool { return s.PerSecond.PoolSize == 4 }},
	} {
		s, err := FromEnv(env(tc.kv...))
		if err != nil {
			t.Errorf("%v: %v, want a start as theirs", tc.kv, err)
			continue
		}
		if len(s.Adjusted) != 1 || !strings.Contains(s.Adjusted[0], tc.want) || !tc.got(s) {
			t.Errorf("%v: adjusted %q, settings %+v; want one note with %q", tc.kv, s.Adjusted, s, tc.want)
		}
	}
	s, err := FromEnv(env("LOCAL_CACHE_SIZE_IN_BYTES=1048576", "NEAR_LIMIT_RATIO=1", "EXPIRATION_JITTER_MAX_SECONDS=0", "REDIS_PERSECOND_POOL_SIZE=0"))
	if err != nil || len(s.Adjusted) != 0 || s.LocalCacheSizeInBytes != 1<<20 {
		t.Errorf("values read as written: %v, %q, %+v", err, s.Adjusted, s)
	}
	if _, err := NewService(Options{Store: &MemoryStore{}, NearLimitRatio: float32(math.NaN())}); err != nil {
		t.Errorf("NewService with a NaN near-limit ratio: %v", err)
	}
}

func TestSettingsRefused(t *testing.T) {
	for _, tc := range []struct{ kv, want string }{
		{"PORT=http", "PORT"},
		{"PORT=70000", "PORT"},
		{"SHADOW_MODE=maybe", "SHADOW_MODE"},
		{"NEAR_LIMIT_RATIO=x", "NEAR_LIMIT_RATIO"},
		{"REDIS_TIMEOUT=soon", "REDIS_TIMEOUT"},
		{"REDIS_TIMEOUT=-1s", `REDIS_TIMEOUT="-1s": want a duration of 0 or more`},
		{"REDIS_PERSECOND_TIMEOUT=-5", "REDIS_PERSECOND_TIMEOUT"},
		{"BACKEND_TYPE=memcache", "memcached"},
		{"BACKEND_TYPE=etcd", "BACKEND_TYPE"},
		{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_TYPE"},
		{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_USE_TLS"},
		{"EXPIRATION_JITTER_MAX_SECONDS=soon", "EXPIRATION_JITTER_MAX_SECONDS"},
		{"FLOODGATE_MAX_CONNECTIONS=-1", "FLOODGATE_MAX_CONNECTIONS"},
		{"FLOODGATE_MAX_CONNECTIONS=lots", "FLOODGATE_MAX_CONNECTIONS"},
		{"FLOODGATE_MAX_CONNECTIONS=2147483648", "FLOODGATE_MAX_CONNECTIONS"},
		{"FLOODGATE_MAX_DESCRIPTORS=0", "FLOODGATE_MAX_DESCRIPTORS=0: want 1..1000000"},
		{"FLOODGATE_MAX_DESCRIPTORS=-1", "FLOODGATE_MAX_DESCRIPTORS"},
		{"FLOODGATE_MAX_DESCRIPTORS=1000001", "FLOODGATE_MAX_DESCRIPTORS"},
		{"FLOODGATE_MAX_DESCRIPTORS=many", "FLOODGATE_MAX_DESCRIPTORS"},
		{"FLOODGATE_GRPC_REFLECTION=yes", `FLOODGATE_GRPC_REFLECTION="yes": want true or false`},
		{"HOST=[::1]", "HOST=[::1]: give the IPv6 address without brackets (HOST=::1)"},
		{"GRPC_HOST=[::1]", "GRPC_HOST=[::1]: give the IPv6 address without brackets (GRPC_HOST=::1)"},
		{"DEBUG_HOST=[fe80::1%eth0]", "DEBUG_HOST=[fe80::1%eth0]: give the IPv6 address without brackets (DEBUG_HOST=fe80::1%eth0)"},
	} {
		if _, err := FromEnv(env(tc.kv, "LIMIT_RESPONSE_HEADERS_ENABLED=false")); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.kv, err, tc.want)
		}
	}
	if _, err := FromEnv(env("LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=bad header")); err == nil {
		t.Error("a header name with a space was accepted")
	}
}

// TestSettingsMaxDescriptors: FLOODGATE_MAX_DESCRIPTORS, Floodgate's own
// bound on a request's descriptors (theirs has none), is 1000 by default
// and reaches Options.
func TestSettingsMaxDescriptors(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want int
	}{{nil, 1000}, {[]string{"FLOODGATE_MAX_DESCRIPTORS=20"}, 20}} {
		s, err := FromEnv(env(tc.env...))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Options().MaxDescriptors; got != tc.want {
			t.Errorf("%v: Options().MaxDescriptors = %d, want %d", tc.env, got, tc.want)
		}
	}
}
