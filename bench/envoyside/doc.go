// Package envoyside runs envoyproxy/ratelimit's own loader and fixed
// window cache (its Go module from the module proxy) side by side with
// Floodgate's envoy-compat mode on the same inputs and the same Redis.
// It has only tests.
package envoyside
