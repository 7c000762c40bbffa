package config_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// decideOver makes one rate limit decision through c (a real one: the
// script loaded and run over the connection), or returns the error.
func decideOver(t *testing.T, c redis.UniversalClient) error {
	t.Helper()
	st, err := redisstore.New(c, redisstore.Options{})
	if err != nil {
		return err
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "tls"})
	if err != nil {
		return err
	}
	p, _ := floodgate.NewFixedWindow("tls", 5, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := lim.Allow(ctx, p, t.Name())
	if err == nil && r.Remaining != 4 {
		t.Fatalf("decision over TLS: %+v", r)
	}
	return err
}

// TestRedisTLSEveryTopology runs decisions over TLS against real
// redis-server processes that require client certificates: standalone
// (rediss://), Sentinel (rediss-sentinel:// and sentinel addresses with
// TLS settings) and Cluster (rediss-cluster:// and cluster addresses).
// Servers are verified: without the CA, or under a name the certificate
// does not carry, or without the client certificate, nothing works.
func TestRedisTLSEveryTopology(t *testing.T) {
	f := redistest.GenerateTLS(t)
	f.AuthClients = true
	full := &config.RedisTLS{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}
	named := &config.RedisTLS{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, ServerName: f.ServerName}
	single := redistest.StartTLS(t, f)
	sent := redistest.StartSentinelTLS(t, f)
	cl := redistest.StartClusterTLS(t, f)
	sentinels := strings.Join(sent.SentinelTLSAddrs, ",")
	nodes := cl.Nodes[0].TLSAddr + "," + cl.Nodes[1].TLSAddr
	ok := []struct {
		name string
		r    config.Redis
	}{
		{"rediss URL", config.Redis{URL: "rediss://" + single.TLSAddr + "/0", TLS: full}},
		{"redis URL with TLS settings and a server name", config.Redis{URL: "redis://" + single.TLSAddr, TLS: named}},
		{"rediss-sentinel URL", config.Redis{URL: "rediss-sentinel://" + sentinels + "/0?master=" + sent.MasterName, TLS: full}},
		{"sentinel addresses with TLS", config.Redis{SentinelAddrs: sent.SentinelTLSAddrs, SentinelMaster: sent.MasterName, TLS: named}},
		{"rediss-cluster URL", config.Redis{URL: "rediss-cluster://" + nodes, TLS: full}},
		{"cluster addresses with TLS", config.Redis{ClusterAddrs: []string{cl.Nodes[2].TLSAddr}, TLS: named}},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			client, err := c.r.Client()
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if err := decideOver(t, client); err != nil {
				t.Fatalf("decision: %v", err)
			}
		})
	}
	bad := []struct {
		name string
		r    config.Redis
		want string
	}{
		{"system roots only", config.Redis{URL: "rediss://" + single.TLSAddr, TLS: &config.RedisTLS{CertFile: f.ClientCert, KeyFile: f.ClientKey}}, "certificate signed by unknown authority"},
		{"wrong server name", config.Redis{URL: "rediss://" + single.TLSAddr, TLS: &config.RedisTLS{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, ServerName: "other.example"}}, "certificate is valid for"},
		{"no client certificate", config.Redis{URL: "rediss://" + single.TLSAddr, TLS: &config.RedisTLS{CAFile: f.CA}}, ""},
		{"plain sentinel URL to TLS sentinels", config.Redis{URL: "redis-sentinel://" + sentinels + "?master=" + sent.MasterName}, ""},
		{"cluster without the CA", config.Redis{URL: "rediss-cluster://" + nodes}, "certificate signed by unknown authority"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			c.r.DialTimeout, c.r.CommandTimeout = time.Second, time.Second
			client, err := c.r.Client()
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			err = decideOver(t, client)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("decision: %v, want an error containing %q", err, c.want)
			}
		})
	}
	for _, r := range []config.Redis{
		{URL: "rediss://" + single.TLSAddr, TLS: &config.RedisTLS{CAFile: f.ClientKey}},
		{URL: "rediss://" + single.TLSAddr, TLS: &config.RedisTLS{CertFile: f.ClientCert}},
		{URL: "rediss://" + single.TLSAddr, TLS: &config.RedisTLS{CAFile: "/nonexistent/ca.pem"}},
		{URL: "unix:///tmp/redis.sock", TLS: &config.RedisTLS{}},
	} {
		if _, err := r.Client(); !errors.Is(err, config.ErrRedisURL) {
			t.Errorf("%+v: %v, want ErrRedisURL", r.TLS, err)
		}
	}
}
