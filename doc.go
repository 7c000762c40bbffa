// Package floodgate is a rate limiter whose every decision is one atomic step.
//
// A [Policy] describes one limit: an [Algorithm] (fixed window, sliding log,
// sliding window counter, token bucket, GCRA, or a quota per calendar day,
// week or month: [NewQuota]), a limit per window (or per period) and, for
// the bucket algorithms, a burst. A [Limiter] applies policies to identities
// (a user id, an API key, an IP address...) against a [Store]: the in-memory
// store in package memstore, or Redis through package redisstore, where each
// decision is a single Lua script run in one round trip.
//
// Every algorithm is defined once, as a pure step function over integer
// microseconds (package algo, which also holds what a Store implementation
// needs); the stores apply that function (memstore) or mirror it exactly in
// Lua (redisstore), so a decision does not depend on which store made it.
//
// Decisions are all-or-nothing: a denied request consumes nothing, and when
// several layers are decided together ([Limiter.AllowLayers]) a request
// denied by one layer consumes nothing in the others.
//
// Policies built from constants read best with [Must]; [Limiter.Wait]
// sleeps through a GCRA policy's shaping delay. The examples (Example,
// ExampleLimiter_AllowN, ExampleLimiter_AllowLayers, ExampleLimiter_Wait...)
// are runnable: go test -run Example -v github.com/floodgate-rl/floodgate.
//
// The package itself depends only on the standard library.
package floodgate
