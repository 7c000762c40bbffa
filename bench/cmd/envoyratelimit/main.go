// Command envoyratelimit is envoyproxy/ratelimit's service, built from its
// Go module at the version bench/go.mod requires, for the side-by-side
// service benchmark (cmd/servicebench). It reads the same environment
// variables as their image (REDIS_URL, RUNTIME_ROOT, PORT, GRPC_PORT, ...)
// and runs their runner unchanged: nothing here alters their behaviour.
package main

import (
	"github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	"github.com/envoyproxy/ratelimit/src/settings"
)

func main() {
	r := runner.NewRunner(settings.NewSettings())
	r.Run()
}
