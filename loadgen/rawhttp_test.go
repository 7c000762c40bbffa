package loadgen

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The raw HTTP/1.1 client against net/http servers answering in each of
// the ways HTTP/1.1 allows: Content-Length, chunked, Connection: close,
// keep-alives off, an error body larger than the 64 KiB kept.
func TestRawHTTPAnswers(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		noKeep  bool
		allowed int64
		errSub  string
	}{
		{"content length", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"allowed":true}`)) }, false, 20, ""},
		{"chunked", func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte(`{"allowed":`))
			w.(http.Flusher).Flush()
			w.Write([]byte(`true}`))
		}, false, 20, ""},
		{"connection close", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Connection", "close")
			w.Write([]byte(`{"allowed":true}`))
		}, false, 20, ""},
		{"keep-alives off", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"allowed":true}`)) }, true, 20, ""},
		{"big error", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(big))
		}, false, 0, "HTTP 502: xxx"},
		{"denied", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"allowed":false}`))
		}, false, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var received atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if r.Method != http.MethodPost || r.URL.RequestURI() != "/v1/check?enforce=1" || r.Header.Get("Content-Type") != "application/json" ||
					!strings.HasPrefix(string(body), `{"policy":"api","identity":{"user":"p-`) || r.ContentLength != int64(len(body)) {
					http.Error(w, "unexpected request", http.StatusBadRequest)
					return
				}
				received.Add(1)
				tt.handler(w, r)
			}))
			srv.Config.SetKeepAlivesEnabled(!tt.noKeep)
			srv.Start()
			t.Cleanup(srv.Close)
			rep, err := Run(context.Background(), Options{Target: srv.URL, Concurrency: 2, Duration: 5 * time.Second, MaxRequests: 20, Identities: 3, IdentityPrefix: "p-"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, rep, received.Load())
			if rep.Allowed != tt.allowed || rep.Sent != 20 {
				t.Errorf("report %+v", rep)
			}
			if tt.errSub == "" && rep.Errors != 0 || tt.errSub != "" && (rep.Errors != 20 || !strings.Contains(rep.ErrorSamples[0].Message, tt.errSub)) {
				t.Errorf("errors %d %v, want %q", rep.Errors, rep.ErrorSamples, tt.errSub)
			}
		})
	}
}

// A server that closes each connection after one answer, without saying
// so: the next request, sent a while later (open loop), finds the kept
// connection closed before writing to it and goes on a new one.
func TestRawHTTPStaleConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns, answered atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				answered.Add(1)
				const body = `{"allowed":true}`
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
			}()
		}
	}()
	rep, err := Run(context.Background(), Options{Target: "http://" + ln.Addr().String(), Concurrency: 1, Rate: 50, Duration: 5 * time.Second, MaxRequests: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Allowed != 10 || rep.Errors != 0 || answered.Load() != 10 || conns.Load() < 10 {
		t.Errorf("report %+v; %d answered on %d connections", rep, answered.Load(), conns.Load())
	}
}

// With an HTTPClient given, requests go through it (net/http).
func TestHTTPClientOption(t *testing.T) {
	srv, url := startCheckServer(t)
	var trips atomic.Int64
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		trips.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	rep, err := Run(context.Background(), Options{Target: url, Concurrency: 2, Duration: 5 * time.Second, MaxRequests: 12, Identities: 4, HTTPClient: client}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep, srv.received.Load())
	if rep.Errors != 0 || trips.Load() != 12 || rep.Allowed != wantAllowed(12, 4) {
		t.Errorf("report %+v, %d round trips", rep, trips.Load())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestASCIIEqualFold(t *testing.T) {
	for _, tt := range []struct {
		b, s string
		want bool
	}{{"content-length", "Content-Length", true}, {"CONTENT-LENGTH", "Content-Length", true}, {"Content\rLength", "Content-Length", false}, {"Content-Lengt", "Content-Length", false}} {
		if got := asciiEqualFold([]byte(tt.b), tt.s); got != tt.want {
			t.Errorf("asciiEqualFold(%q, %q) = %v", tt.b, tt.s, got)
		}
	}
}

// A server that reads every third request, counts it and closes the
// connection without answering: the request is an error that says it may
// have been decided, and is not sent again (it used to be, once, on a new
// connection, and the report hid it).
func TestRawHTTPClosedAfterTheRequestIsNotResent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	var received atomic.Int64
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if _, err := io.Copy(io.Discard, req.Body); err != nil {
						return
					}
					if received.Add(1)%3 == 0 {
						return // decided, and no answer
					}
					const body = `{"allowed":true}`
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
						return
					}
				}
			})
		}
	})
	rep, err := Run(context.Background(), Options{Target: "http://" + ln.Addr().String(), Concurrency: 1, Duration: time.Minute, MaxRequests: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 9 || rep.Allowed != 6 || rep.Errors != 3 || received.Load() != 9 ||
		len(rep.ErrorSamples) != 1 || !strings.Contains(rep.ErrorSamples[0].Message, "may have been decided (not re-sent)") {
		t.Errorf("report %+v; the server received %d", rep, received.Load())
	}
}
