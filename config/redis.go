package config

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
)

// ErrNotFound reports that Redis holds no configuration under the key.
var ErrNotFound = errors.New("config: no configuration stored in Redis")

// Keys are the Redis names a Floodgate deployment shares, all under its key
// prefix.
type Keys struct {
	// Config is the string key holding the YAML configuration document,
	// e.g. "fg:config".
	Config string
	// Channel is the pub/sub channel announcing a new document, e.g.
	// "fg:config:changed"; the message is the new version.
	Channel string
	// Tiers is the hash of per-identity tier assignments, e.g. "fg:tiers".
	Tiers string
}

// KeysFor returns the Keys under prefix, which must be a valid key prefix
// (see floodgate.ValidatePrefix).
func KeysFor(prefix string) (Keys, error) {
	if err := floodgate.ValidatePrefix(prefix); err != nil {
		return Keys{}, err
	}
	return Keys{
		Config:  prefix + ":config",
		Channel: prefix + ":config:changed",
		Tiers:   prefix + ":tiers",
	}, nil
}

// LoadRedis reads the configuration document stored under keys.Config and
// parses it, requiring a version field. It fails with ErrNotFound when the
// key does not exist.
func LoadRedis(ctx context.Context, client redis.UniversalClient, keys Keys) (*Config, error) {
	data, err := getDoc(ctx, client, keys)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data, "redis:"+keys.Config)
	if err != nil {
		return nil, err
	}
	if c.Version() == "" {
		return nil, &Error{File: c.Source(), Msg: "a shared configuration needs a version field"}
	}
	return c, nil
}

func getDoc(ctx context.Context, client redis.UniversalClient, keys Keys) ([]byte, error) {
	data, err := client.Get(ctx, keys.Config).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w (key %q)", ErrNotFound, keys.Config)
	}
	if err != nil {
		return nil, fmt.Errorf("config: reading %q from Redis: %w", keys.Config, err)
	}
	if len(data) > MaxSize {
		return nil, &Error{File: "redis:" + keys.Config, Msg: fmt.Sprintf("document is %d bytes (max %d)", len(data), MaxSize)}
	}
	return data, nil
}

// Publish validates data and, only if it is valid and has a version,
// stores it under keys.Config and announces its version on keys.Channel,
// so that every instance watching with WatchRedis applies it. It returns
// the parsed configuration.
func Publish(ctx context.Context, client redis.UniversalClient, keys Keys, data []byte) (*Config, error) {
	c, err := Parse(data, "redis:"+keys.Config)
	if err != nil {
		return nil, err
	}
	if c.Version() == "" {
		return nil, &Error{File: c.Source(), Msg: "a shared configuration needs a version field"}
	}
	if err := client.Set(ctx, keys.Config, data, 0).Err(); err != nil {
		return nil, fmt.Errorf("config: storing %q in Redis: %w", keys.Config, err)
	}
	if err := client.Publish(ctx, keys.Channel, c.Version()).Err(); err != nil {
		return nil, fmt.Errorf("config: stored, but announcing on %q failed (instances pick it up at their next poll): %w", keys.Channel, err)
	}
	return c, nil
}

// WatchRedis applies the document under keys.Config whenever a message
// arrives on keys.Channel, and also every poll (default 10s) in case a
// message was missed while disconnected. Documents go through
// ApplyVersioned. It returns when ctx ends.
func (r *Reloader) WatchRedis(ctx context.Context, client redis.UniversalClient, keys Keys, poll time.Duration) {
	if poll <= 0 {
		poll = 10 * time.Second
	}
	sub := client.Subscribe(ctx, keys.Channel)
	defer sub.Close()
	// Wait for the subscription to be confirmed (or fail: the client keeps
	// retrying in the background and the poll covers the gap), then fetch
	// once to catch a document stored before the subscription existed.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, _ = sub.Receive(rctx)
	cancel()
	msgs := sub.Channel()
	t := time.NewTicker(poll)
	defer t.Stop()
	source := "redis:" + keys.Config
	lastSum := r.holder.Load().Hash()
	var lastErr string
	fetch := func() {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		data, err := getDoc(fctx, client, keys)
		if err != nil {
			if ctx.Err() == nil {
				r.sourceError(&lastErr, source, err)
			}
			return
		}
		lastErr = ""
		if sum := hashOf(data); sum != lastSum {
			lastSum = sum
			_, _ = r.ApplyVersioned(data, source)
		}
	}
	fetch()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-msgs:
			if !ok {
				return
			}
			fetch()
		case <-t.C:
			fetch()
		}
	}
}
