// Package algo is what a floodgate.Store implementation needs, and what an
// application using a Limiter does not: the step function that defines
// every algorithm, the state it keeps per identity, and the key helpers.
//
// Every algorithm is defined once, as a pure function over integer
// microseconds ([Step]): given a policy, an identity's [State], the time and
// a cost, it returns a [Transition] (the decision and the state to store,
// with its time to live). Package memstore applies Step under locks;
// package redisstore mirrors it in Lua, and differential tests check that
// both agree with Step on random sequences for every algorithm.
//
// A Store that decides several layers and denies the request reports, for
// each layer that would have admitted it, its [Standing]. [KeyAt] is the key
// a floodgate.Limiter hands its Store; [HashTag] is the part of it Redis
// Cluster hashes.
package algo
