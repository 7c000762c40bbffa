package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// sender sends one check and says whether it was allowed.
type sender interface {
	send(ctx context.Context, identity string) (allowed bool, err error)
	close() error
}

func newSender(o Options) (sender, error) {
	u, err := url.Parse(o.Target)
	if err != nil {
		return nil, fmt.Errorf("%w: target %q: %v", ErrInvalidOptions, o.Target, err)
	}
	if o.Mode == GRPC {
		conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("loadgen: grpc client for %s: %w", u.Host, err)
		}
		return &grpcSender{conn: conn, client: rlspb.NewRateLimitServiceClient(conn), opts: o}, nil
	}
	client := o.HTTPClient
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = o.Concurrency
		tr.MaxIdleConnsPerHost = o.Concurrency
		client = &http.Client{Transport: tr}
	}
	return &httpSender{
		client: client,
		url:    strings.TrimSuffix(o.Target, "/") + "/v1/check?enforce=1",
		opts:   o,
	}, nil
}

type httpSender struct {
	client *http.Client
	url    string
	opts   Options
}

type checkBody struct {
	Policy   string            `json:"policy"`
	Identity map[string]string `json:"identity"`
	Cost     int64             `json:"cost"`
}

func (s *httpSender) send(ctx context.Context, identity string) (bool, error) {
	body, err := json.Marshal(checkBody{Policy: s.opts.Policy, Identity: map[string]string{s.opts.IdentityKey: identity}, Cost: s.opts.Cost})
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return false, fmt.Errorf("reading the response: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var out struct {
			Allowed *bool `json:"allowed"`
		}
		if err := json.Unmarshal(data, &out); err != nil || out.Allowed == nil {
			return false, fmt.Errorf("HTTP 200 without a boolean \"allowed\": %s", clip(data))
		}
		return *out.Allowed, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("HTTP %d: %s", resp.StatusCode, clip(data))
}

func (s *httpSender) close() error {
	s.client.CloseIdleConnections()
	return nil
}

// clip keeps error messages short and on one line.
func clip(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

type grpcSender struct {
	conn   *grpc.ClientConn
	client rlspb.RateLimitServiceClient
	opts   Options
}

func (s *grpcSender) send(ctx context.Context, identity string) (bool, error) {
	resp, err := s.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{
		Domain: s.opts.Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: s.opts.IdentityKey, Value: identity}},
		}},
		HitsAddend: uint32(s.opts.Cost),
	})
	if err != nil {
		return false, err
	}
	switch resp.GetOverallCode() {
	case rlspb.RateLimitResponse_OK:
		return true, nil
	case rlspb.RateLimitResponse_OVER_LIMIT:
		return false, nil
	}
	return false, fmt.Errorf("overall_code %v", resp.GetOverallCode())
}

func (s *grpcSender) close() error { return s.conn.Close() }
