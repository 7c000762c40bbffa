// Package envoyrls serves Envoy's global rate limit API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from a
// floodgate.Limiter, so Envoy, Istio, Contour and Gloo can use Floodgate as
// their rate limit service.
//
// Limits are configured in the YAML descriptor format of
// envoyproxy/ratelimit (a domain with nested descriptors, each with a key,
// an optional value and a rate_limit of requests_per_unit per unit). Every
// construct of that format is either honoured as envoyproxy/ratelimit does
// or refused at load with an error naming it (see ParseConfig); package
// envoycompat is the drop-in that honours all of them. Floodgate extends
// the format with a choice of algorithm, any window length and a burst for
// the bucket algorithms.
//
// Unlike envoyproxy/ratelimit, all descriptors of one request are decided
// together as the layers of one floodgate.Limiter.AllowLayers call: one
// store round trip, and a request denied by one descriptor consumes nothing
// in the others.
package envoyrls
