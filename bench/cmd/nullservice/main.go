// Command nullservice answers rate limit checks without deciding anything:
// every check is allowed by a fixed answer, and no store is consulted. It
// measures the floor of servicebench's comparison, what net/http and
// grpc-go cost per request on this machine with a handler that does no
// work, so that each service's CPU per decision can be read against it.
//
// It serves POST /v1/check and POST /json on -http (a fixed JSON answer
// of floodgate serve's size, with the X-RateLimit-* headers serve sends)
// and Envoy's ShouldRateLimit on -grpc (a fixed OK), with the HTTP server
// timeouts and gRPC server options floodgate serve uses by default and
// its garbage collector setting (a 64 MiB heap floor). -http-server
// fasthttp serves HTTP on fasthttp with the settings of floodgate serve
// --http-server fasthttp instead of net/http.
//
//	nullservice -http 127.0.0.1:8080 -grpc 127.0.0.1:8081 [-http-server fasthttp]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/floodgate-rl/floodgate/internal/gctune"
	"github.com/floodgate-rl/floodgate/internal/rlswire"
)

// checkAnswer is what floodgate serve answers POST /v1/check for a
// one-layer policy that allows, byte for byte in size and shape.
var checkAnswer = []byte(`{"allowed":true,"policy":"api","limit":1000000000,"remaining":999999999,"reset_after_ms":60000,"retry_after_ms":0,"layers":[{"name":"per-user","allowed":true,"limit":1000000000,"remaining":999999999,"reset_after_ms":60000}]}` + "\n")

// jsonAnswer is envoyproxy/ratelimit's answer to POST /json when allowed.
var jsonAnswer = []byte(`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1000000000,"unit":"MINUTE"},"limitRemaining":999999999,"durationUntilReset":"60s"}]}` + "\n")

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nullservice:", err)
		os.Exit(1)
	}
}

func run() error {
	httpAddr := flag.String("http", "127.0.0.1:8080", "HTTP listen address")
	grpcAddr := flag.String("grpc", "127.0.0.1:8081", "gRPC listen address")
	engine := flag.String("http-server", "net/http", "HTTP server: net/http or fasthttp")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *engine != "net/http" && *engine != "fasthttp" {
		return fmt.Errorf("-http-server %q: want net/http or fasthttp", *engine)
	}
	if os.Getenv("GOGC") == "" {
		defer gctune.Start(64 << 20).Stop() // as floodgate serve's --gc-heap-floor-mib default
	}
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", answer(checkAnswer))
	mux.HandleFunc("POST /json", answer(jsonAnswer))
	// floodgate serve's HTTP server settings (server.Server.Serve).
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	// floodgate serve's default gRPC server options (cmd/floodgate's
	// grpcServerOptions, without TLS, and rlswire.ServerOptions: the codec
	// and static flow-control windows).
	gs := grpc.NewServer(append(rlswire.ServerOptions(256), // envoyrls.MaxRequestDescriptors
		grpc.MaxConcurrentStreams(256),
		grpc.MaxRecvMsgSize(4<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute, Time: 2 * time.Minute, Timeout: 20 * time.Second,
			MaxConnectionAge: 30 * time.Minute, MaxConnectionAgeGrace: time.Minute}),
		grpc.NumStreamWorkers(256),
	)...)
	rlspb.RegisterRateLimitServiceServer(gs, allowAll{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errs := make(chan error, 2)
	var fs *fasthttp.Server
	if *engine == "fasthttp" {
		fs = fastServer()
		go func() { errs <- fs.Serve(hl) }()
	} else {
		go func() { errs <- hs.Serve(hl) }()
	}
	go func() { errs <- gs.Serve(gl) }()
	fmt.Fprintf(os.Stderr, "nullservice: HTTP on %s, gRPC on %s\n", hl.Addr(), gl.Addr())
	select {
	case err = <-errs:
	case <-ctx.Done():
	}
	gs.Stop()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if fs != nil {
		_ = fs.ShutdownWithContext(sctx)
	} else {
		_ = hs.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// bodies keeps request body buffers between requests.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// answer reads the request's body (as a service must, to decide) and
// writes body with the headers floodgate serve sends on an allowed check.
func answer(body []byte) http.HandlerFunc {
	ctype := []string{"application/json"}
	limit, remaining, reset := []string{"1000000000"}, []string{"999999999"}, []string{"1796212345"}
	return func(w http.ResponseWriter, r *http.Request) {
		buf := bodies.Get().(*bytes.Buffer)
		buf.Reset()
		_, err := io.Copy(buf, io.LimitReader(r.Body, 1<<20))
		bodies.Put(buf)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h := w.Header()
		h["Content-Type"] = ctype
		h["X-Ratelimit-Limit"] = limit
		h["X-Ratelimit-Remaining"] = remaining
		h["X-Ratelimit-Reset"] = reset
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}
}

// allowAll answers every ShouldRateLimit with OK for each descriptor.
type allowAll struct {
	rlspb.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit implements rlspb.RateLimitServiceServer.
func (allowAll) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	resp.Statuses = make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: 999_999_999}
	}
	return resp, nil
}

// fastServer is the HTTP server on fasthttp, with floodgate serve
// --http-server fasthttp's settings (server.Server's serveFast): the same
// answers as answer's.
func fastServer() *fasthttp.Server {
	check, envoy := []byte("/v1/check"), []byte("/json")
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			var body []byte
			switch path := ctx.Path(); {
			case !ctx.IsPost():
				ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
				return
			case bytes.Equal(path, check):
				body = checkAnswer
			case bytes.Equal(path, envoy):
				body = jsonAnswer
			default:
				ctx.SetStatusCode(fasthttp.StatusNotFound)
				return
			}
			_ = ctx.PostBody() // read whole before the handler runs, as serve's
			h := &ctx.Response.Header
			h.SetContentType("application/json")
			h.Set("X-Ratelimit-Limit", "1000000000")
			h.Set("X-Ratelimit-Remaining", "999999999")
			h.Set("X-Ratelimit-Reset", "1796212345")
			ctx.SetBody(body)
		},
		ReadTimeout:                  5 * time.Second,
		WriteTimeout:                 30 * time.Second,
		IdleTimeout:                  2 * time.Minute,
		ReadBufferSize:               64 << 10,
		MaxRequestBodySize:           1 << 20,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
	}
}
