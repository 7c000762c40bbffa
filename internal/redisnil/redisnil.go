// Package redisnil tells a nil reply from Redis (redis.Nil: a missing key,
// a script that returned nil) apart from a failure that merely carries
// one.
//
// errors.Is(err, redis.Nil) cannot: go-redis's failover client reports
// sentinels that do not know the master name (SENTINEL
// GET-MASTER-ADDR-BY-NAME answers nil) as "redis: all sentinels specified
// in configuration are unreachable: redis: nil", which wraps redis.Nil.
// Read as a nil reply, it made a health probe find a missing key, and so
// a healthy store, while every decision failed (an outside walk of
// envoy-compat with a wrong master name).
package redisnil

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"
)

// IsReply reports whether err is a nil reply: redis.Nil itself, or wrapped
// by errors that each wrap one error only (fmt.Errorf with one %w). An
// error that joins several (errors.Join, as go-redis's failover client
// joins the sentinels' answers) is a failure, not a reply: IsReply
// reports false for it, whatever it holds.
func IsReply(err error) bool {
	for err != nil {
		if err == redis.Nil { //nolint:errorlint // the chain is walked by hand
			return true
		}
		u, ok := err.(interface{ Unwrap() error }) //nolint:errorlint // see above
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// UnknownMaster reports whether err carries a nil reply without being one
// (see IsReply): with go-redis 9, a failover client that found no sentinel
// naming the primary, at least one of them answering that it does not
// know the master name. The store is unusable, and nothing was sent to
// the primary.
func UnknownMaster(err error) bool {
	return err != nil && errors.Is(err, redis.Nil) && !IsReply(err)
}

// MasterHook returns a hook for a go-redis failover client of the master
// name master (add it with AddHook): when a dial fails because the
// sentinels do not know that name (UnknownMaster), the error says so,
// naming it, rather than "all sentinels specified in configuration are
// unreachable: redis: nil". The error still wraps go-redis's.
func MasterHook(master string) redis.Hook { return masterHook(master) }

type masterHook string

// DialHook implements redis.Hook.
func (h masterHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if UnknownMaster(err) {
			err = fmt.Errorf("redis: the sentinels do not know master %q (SENTINEL GET-MASTER-ADDR-BY-NAME answered nil: check the name against their \"sentinel monitor\" line): %w", string(h), err)
		}
		return c, err
	}
}

// ProcessHook implements redis.Hook.
func (masterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (masterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
