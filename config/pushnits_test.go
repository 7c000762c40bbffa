package config_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// pushnitsDoc is a versioned document for the confirmation tests.
func pushnitsDoc(version string) []byte {
	return fmt.Appendf(nil, "version: %q\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n", version)
}

// pushnitsKeys returns keys under a prefix of their own.
func pushnitsKeys(t *testing.T) config.Keys {
	t.Helper()
	keys, err := config.KeysFor(fmt.Sprintf("pn%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestPublishSubMillisecondReplicaTimeoutEnds: a ReplicaTimeout below
// 1 ms waits 1 ms, not for ever. go-redis sends WAIT's timeout in whole
// milliseconds, so 500µs went out as WAIT 1 0, which waits for ever: an
// outside walk (rwfault) saw config push hang until go-redis's read
// deadline and fail with "WAIT 1: read tcp ...: i/o timeout".
func TestPublishSubMillisecondReplicaTimeoutEnds(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys := pushnitsKeys(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := config.PublishWith(ctx, client, keys, pushnitsDoc("1"), config.PublishOptions{Replicas: 1, ReplicaTimeout: 500 * time.Microsecond})
	took := time.Since(start)
	if !errors.Is(err, config.ErrNotConfirmed) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged it within 1ms") {
		t.Fatalf("PublishWith (Replicas 1, ReplicaTimeout 500µs, no replica) = %v after %v; want ErrNotConfirmed, 0 of 1 within 1ms", err, took)
	}
	if took > time.Second {
		t.Errorf("took %v; want about 1 ms", took)
	}
}

// TestPublishToReplicaSaysSo: a push to a replica's address says the
// server is a replica and to give the primary or the sentinels, and
// claims no write. An outside walk (rwfault) pushed the version the
// replica held to its address: nothing was written, yet push said it
// "was stored on a primary that may lose it in a failover" and "the
// server that took it is now a slave", and so again on every retry.
func TestPublishToReplicaSaysSo(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	keys := pushnitsKeys(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := config.PublishWith(ctx, primary.Client(t), keys, pushnitsDoc("21"), config.PublishOptions{Replicas: config.ReplicasOnline}); err != nil {
		t.Fatalf("push of 21 to the primary: %v", err)
	}
	rc := replica.Client(t)
	for _, version := range []string{"21", "22"} {
		_, err := config.PublishWith(ctx, rc, keys, pushnitsDoc(version), config.PublishOptions{Replicas: config.ReplicasOnline})
		if err == nil {
			t.Fatalf("push of %s to the replica: no error", version)
		}
		msg := err.Error()
		want := "the server at " + replica.Addr + " is a replica; give the primary, or the sentinels with --redis-sentinel"
		if !strings.Contains(msg, want) || strings.Contains(msg, "was stored") || strings.Contains(msg, "now a") {
			t.Errorf("push of %s to the replica: %v\nwant %q, and no \"was stored\" or \"now a\"", version, msg, want)
		}
		if errors.Is(err, config.ErrNotConfirmed) {
			t.Errorf("push of %s to the replica wraps ErrNotConfirmed; nothing was stored there", version)
		}
	}
}

// TestPublishTooFewReplicasSaysWhy: asked for more replicas than the
// primary lists online, push says so and what to do, not to run it
// again (which would fail the same way), and that instances polling may
// still apply the document it stored.
func TestPublishTooFewReplicasSaysWhy(t *testing.T) {
	single := redistest.Start(t)
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name   string
		client *redis.Client
		want   int
		online int
	}{
		{"1 on a primary without replicas", single.Client(t), 1, 0},
		{"2 on a primary with 1", primary.Client(t), 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := pushnitsKeys(t)
			_, err := config.PublishWith(ctx, tc.client, keys, pushnitsDoc("5"), config.PublishOptions{Replicas: tc.want, ReplicaTimeout: 50 * time.Millisecond})
			if !errors.Is(err, config.ErrNotConfirmed) {
				t.Fatalf("PublishWith = %v; want ErrNotConfirmed", err)
			}
			msg := err.Error()
			for _, want := range []string{
				fmt.Sprintf("the primary lists %d online, fewer than --wait-replicas %d", tc.online, tc.want),
				"lower --wait-replicas (0: do not wait) or bring the replicas back",
				"stored on the primary",
				"instances polling may still apply it",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q\nlacks %q", msg, want)
				}
			}
			if strings.Contains(msg, "run the push again") {
				t.Errorf("error %q says to run the push again, which fails the same way", msg)
			}
			// Pushed again, the document is already stored: nothing is
			// written, and the error does not say it was stored now.
			_, err = config.PublishWith(ctx, tc.client, keys, pushnitsDoc("5"), config.PublishOptions{Replicas: tc.want, ReplicaTimeout: 50 * time.Millisecond})
			if err == nil || !strings.Contains(err.Error(), "already stored on the primary (nothing was written)") {
				t.Errorf("push again = %v; want it to say the version is already stored, nothing written", err)
			}
		})
	}
}

// TestPublishConnectionClosedDuringWaitSaysSo: a connection closed while
// push waits for its replicas (as a failover closes the demoted
// primary's clients) is reported by its cause first, with go-redis's
// error at the end. An outside walk (rwfault) saw only "WAIT 1: redis:
// Conn is in a bad state: read tcp ...: use of closed network
// connection" after a push 0.3 s after SENTINEL FAILOVER.
func TestPublishConnectionClosedDuringWaitSaysSo(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	admin := rs.Client(t)
	keys := pushnitsKeys(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	killed := make(chan error, 1)
	go func() {
		// Kill the connection blocked in WAIT.
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			list, err := admin.ClientList(ctx).Result()
			if err != nil {
				killed <- err
				return
			}
			for line := range strings.SplitSeq(list, "\n") {
				if strings.Contains(line, " cmd=wait ") {
					for f := range strings.FieldsSeq(line) {
						if id, ok := strings.CutPrefix(f, "id="); ok {
							killed <- admin.Do(ctx, "client", "kill", "id", id).Err()
							return
						}
					}
				}
			}
		}
		killed <- errors.New("no connection in WAIT within 3s")
	}()
	_, err := config.PublishWith(ctx, client, keys, pushnitsDoc("1"), config.PublishOptions{Replicas: 1, ReplicaTimeout: 4 * time.Second})
	if kerr := <-killed; kerr != nil {
		t.Fatalf("killing the push's connection: %v", kerr)
	}
	if !errors.Is(err, config.ErrNotConfirmed) {
		t.Fatalf("PublishWith = %v; want ErrNotConfirmed", err)
	}
	msg := err.Error()
	cause := "the connection to the primary closed during the confirmation, as happens when a failover demotes it"
	if i, j := strings.Index(msg, cause), strings.Index(msg, "WAIT 1: "); i < 0 || j < i {
		t.Errorf("error %q\nwant %q before go-redis's \"WAIT 1: ...\"", msg, cause)
	}
	if !strings.Contains(msg, "run the push again") {
		t.Errorf("error %q: want \"run the push again\"", msg)
	}
}
