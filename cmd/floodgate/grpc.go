package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/envoyrls"
)

// startGRPC serves Envoy's rate limit API on --grpc-addr when it is set,
// and returns a function that stops it gracefully (bounded by
// --drain-timeout).
func startGRPC(f serveFlags, lim *floodgate.Limiter, log *slog.Logger) (stop func(), err error) {
	if f.grpcAddr == "" {
		if f.envoyConfig != "" {
			return nil, errors.New("--envoy-config needs --grpc-addr")
		}
		return func() {}, nil
	}
	if f.envoyConfig == "" {
		return nil, errors.New("--grpc-addr needs --envoy-config (descriptors in envoyproxy/ratelimit's YAML format)")
	}
	data, err := os.ReadFile(f.envoyConfig)
	if err != nil {
		return nil, fmt.Errorf("--envoy-config: %w", err)
	}
	ec, err := envoyrls.ParseConfig(data, f.envoyConfig)
	if err != nil {
		return nil, err
	}
	svc, err := envoyrls.NewService(lim, func() *envoyrls.Config { return ec }, envoyrls.Options{ResponseHeaders: true})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	gs := grpc.NewServer()
	svc.Register(gs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := gs.Serve(ln); err != nil {
			log.Error("gRPC server stopped", "error", err)
		}
	}()
	log.Info("floodgate gRPC (Envoy rate limit service) listening", "addr", ln.Addr().String(),
		"config", f.envoyConfig, "domains", ec.Domains())
	return func() {
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(f.drainTimeout):
			gs.Stop()
		}
		<-done
	}, nil
}
