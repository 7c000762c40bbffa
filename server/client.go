package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client calls a Floodgate service over HTTP. It is safe for concurrent
// use.
type Client struct {
	base string
	http *http.Client
}

// ErrProblem reports a request the service refused or failed; the error
// message carries the problem's detail.
var ErrProblem = errors.New("server: request refused")

// ProblemError is a problem+json response, returned wrapped by Client
// methods. It matches ErrProblem.
type ProblemError struct {
	Problem Problem
}

// Error returns the problem's status and detail.
func (e *ProblemError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Problem.Status, e.Problem.Title, e.Problem.Detail)
}

// Unwrap makes ProblemError match ErrProblem.
func (e *ProblemError) Unwrap() error { return ErrProblem }

// NewClient returns a Client for the service at base (e.g.
// "http://127.0.0.1:8080"). A nil hc means http.DefaultClient.
func NewClient(base string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server: address %q must be an http:// or https:// URL", base)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(base, "/"), http: hc}, nil
}

// Check asks for one decision (POST /v1/check).
func (c *Client) Check(ctx context.Context, req CheckRequest) (CheckResponse, error) {
	var resp CheckResponse
	err := c.post(ctx, "/v1/check", req, &resp)
	return resp, err
}

// Peek asks for the standing of an identity without consuming (POST
// /v1/peek).
func (c *Client) Peek(ctx context.Context, req PeekRequest) (CheckResponse, error) {
	var resp CheckResponse
	err := c.post(ctx, "/v1/peek", req, &resp)
	return resp, err
}

// Batch asks for several decisions (POST /v1/check/batch).
func (c *Client) Batch(ctx context.Context, req BatchRequest) (BatchResponse, error) {
	var resp BatchResponse
	err := c.post(ctx, "/v1/check/batch", req, &resp)
	return resp, err
}

// QuotaCheck consumes cost units of a quota if they fit (POST
// /v1/quota/check).
func (c *Client) QuotaCheck(ctx context.Context, req QuotaCheckRequest) (QuotaResponse, error) {
	var resp QuotaResponse
	err := c.post(ctx, "/v1/quota/check", req, &resp)
	return resp, err
}

// QuotaStatus reports an identity's standing in a quota without consuming
// (POST /v1/quota/status).
func (c *Client) QuotaStatus(ctx context.Context, req QuotaStatusRequest) (QuotaResponse, error) {
	var resp QuotaResponse
	err := c.post(ctx, "/v1/quota/status", req, &resp)
	return resp, err
}

// QuotaReserve holds an estimate of a quota for a unit of work (POST
// /v1/quota/reserve).
func (c *Client) QuotaReserve(ctx context.Context, req QuotaReserveRequest) (QuotaResponse, error) {
	var resp QuotaResponse
	err := c.post(ctx, "/v1/quota/reserve", req, &resp)
	return resp, err
}

// QuotaSettle commits the real cost of a reservation (POST
// /v1/quota/settle). It is idempotent by request id. A quota whose state
// was lost fails with a ProblemError of type
// ProblemTypePrefix+"quota-state-lost": fail closed.
func (c *Client) QuotaSettle(ctx context.Context, req QuotaSettleRequest) (QuotaResponse, error) {
	var resp QuotaResponse
	err := c.post(ctx, "/v1/quota/settle", req, &resp)
	return resp, err
}

// Acquire takes one of an identity's slots for requests in flight (POST
// /v1/concurrency/acquire).
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) (AcquireResponse, error) {
	var resp AcquireResponse
	err := c.post(ctx, "/v1/concurrency/acquire", req, &resp)
	return resp, err
}

// Release frees a lease's slot (POST /v1/concurrency/release).
func (c *Client) Release(ctx context.Context, req LeaseRequest) (ReleaseResponse, error) {
	var resp ReleaseResponse
	err := c.post(ctx, "/v1/concurrency/release", req, &resp)
	return resp, err
}

// Renew extends a live lease (POST /v1/concurrency/renew); a lease no
// longer held fails with a ProblemError of type
// ProblemTypePrefix+"lease-lost".
func (c *Client) Renew(ctx context.Context, req LeaseRequest) (RenewResponse, error) {
	var resp RenewResponse
	err := c.post(ctx, "/v1/concurrency/renew", req, &resp)
	return resp, err
}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("server: encoding request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("server: reading response: %w", err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		var p Problem
		if json.Unmarshal(data, &p) == nil && p.Status != 0 {
			return &ProblemError{Problem: p}
		}
		return &ProblemError{Problem: Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), Detail: strings.TrimSpace(string(data))}}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("server: decoding response: %w", err)
	}
	return nil
}
