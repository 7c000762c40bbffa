package main

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/loginguard"
)

// Demo credentials: the one account this server knows.
const (
	demoUser     = "demo"
	demoPassword = "correct horse battery staple"
	// demoCaptcha is the token the demo accepts as a solved CAPTCHA. A real
	// server verifies the token with its CAPTCHA provider instead.
	demoCaptcha = "solved"
	// maxBody bounds a login form's size, in bytes.
	maxBody = 4 << 10
)

// config is what the server is built from; main fills it from flags.
type config struct {
	// Limiter decides the per-IP limit on POST /login.
	Limiter *floodgate.Limiter
	// PerIP is that limit.
	PerIP floodgate.Policy
	// Guard protects the password check.
	Guard *loginguard.Guard
	// IPs finds client addresses (trusted proxies).
	IPs *clientip.Resolver
	// Iterations is the PBKDF2-SHA256 cost of a password check.
	Iterations int
	// Clock is shared by the middleware (the guard has its own option).
	Clock func() time.Time
	// Logger receives the server's log records; nil discards them.
	Logger *slog.Logger
}

// server checks passwords behind the middleware and the guard.
type server struct {
	cfg   config
	salt  []byte
	users map[string][]byte // normalised name → PBKDF2 hash
	dummy []byte            // a hash no password matches, for unknown names
}

// loginResponse is the JSON body of /login answers that are not problems.
type loginResponse struct {
	Status string `json:"status"`
	// CaptchaRequired tells the client to send a solved CAPTCHA with its
	// next attempt.
	CaptchaRequired bool `json:"captcha_required,omitempty"`
}

// newHandler returns the server's routes: POST /login, limited per client
// IP and guarded per account, IP and pair.
func newHandler(cfg config) (http.Handler, error) {
	if cfg.Iterations < 1 {
		return nil, fmt.Errorf("loginserver: iterations %d, want at least 1", cfg.Iterations)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{cfg: cfg, salt: []byte("loginserver-demo-salt"), users: map[string][]byte{}}
	name, err := loginguard.NormalizeAccount(demoUser)
	if err != nil {
		return nil, err
	}
	if s.users[name], err = s.hash(demoPassword); err != nil {
		return nil, err
	}
	if s.dummy, err = s.hash("no password hashes to this: " + demoPassword); err != nil {
		return nil, err
	}
	mw, err := httplimit.New(cfg.Limiter, []httplimit.Rule{{Policy: cfg.PerIP, Key: httplimit.IP(cfg.IPs)}}, httplimit.Options{
		FailureMode: httplimit.FailClosed, // a login endpoint refuses rather than admit unlimited guesses
		Clock:       cfg.Clock,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /login", mw.Handler(http.HandlerFunc(s.login)))
	return mux, nil
}

func (s *server) hash(password string) ([]byte, error) {
	return pbkdf2.Key(sha256.New, password, s.salt, s.cfg.Iterations, 32)
}

// login handles one attempt. Unknown names go through exactly the same
// steps as known ones (the guard, a full PBKDF2 computation, the same
// answer), so neither the response nor the work reveals which names exist.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the form is over %d bytes", maxBody), 0)
			return
		}
		problem(w, http.StatusBadRequest, "malformed form", 0)
		return
	}
	user, password := r.PostForm.Get("username"), r.PostForm.Get("password")
	ip, err := s.cfg.IPs.ClientIP(r)
	if err != nil {
		s.cfg.Logger.Warn("login: no client address", "error", err)
		problem(w, http.StatusInternalServerError, "cannot identify the client", 0)
		return
	}
	ctx, cancel := guardContext(r)
	v, err := s.cfg.Guard.Check(ctx, user, ip)
	cancel()
	switch {
	case errors.Is(err, loginguard.ErrInvalidAccount):
		problem(w, http.StatusBadRequest, invalidUsername(user, err), 0)
		return
	case err != nil:
		s.unavailable(w, err)
		return
	case !v.Proceed():
		// Delay and lock get the same answer; only the wait differs.
		problem(w, http.StatusTooManyRequests, "too many login attempts; try again later", v.RetryAfter)
		return
	case v.Action == loginguard.CaptchaRequired && r.PostForm.Get("captcha") == "":
		// No CAPTCHA sent: the client did not know one was needed. Nothing
		// is counted and no password is checked.
		ctx, cancel := guardContext(r)
		defer cancel()
		if err := s.cfg.Guard.Abandon(ctx, user, ip); err != nil {
			s.unavailable(w, err)
			return
		}
		reply(w, http.StatusUnauthorized, loginResponse{Status: "captcha_required", CaptchaRequired: true})
		return
	case v.Action == loginguard.CaptchaRequired && r.PostForm.Get("captcha") != demoCaptcha:
		// A wrong CAPTCHA is a failed attempt.
		ctx, cancel := guardContext(r)
		defer cancel()
		if _, err := s.cfg.Guard.Failure(ctx, user, ip); err != nil {
			s.unavailable(w, err)
			return
		}
		reply(w, http.StatusUnauthorized, loginResponse{Status: "captcha_required", CaptchaRequired: true})
		return
	}
	// The password check takes its time before the guard's next call
	// gets its own.
	matches := s.passwordMatches(user, password)
	ctx, cancel = guardContext(r)
	defer cancel()
	if matches {
		if err := s.cfg.Guard.Success(ctx, user, ip); err != nil {
			s.unavailable(w, err)
			return
		}
		reply(w, http.StatusOK, loginResponse{Status: "ok"})
		return
	}
	o, err := s.cfg.Guard.Failure(ctx, user, ip)
	if err != nil {
		s.unavailable(w, err)
		return
	}
	if o.Locked != 0 {
		s.cfg.Logger.Info("login: lock set", "dimensions", o.Locked.String())
	}
	reply(w, http.StatusUnauthorized, loginResponse{Status: "invalid_credentials", CaptchaRequired: o.Next.Action >= loginguard.CaptchaRequired})
}

// guardTimeout bounds each call to the guard: without a deadline, a
// stalled Redis holds a call until the Redis client's own timeouts give
// up (5 s per call with go-redis's defaults, so 15 s for a login's
// Check, Failure and Success), and the login request with it. This
// program's clients time out after 200 ms anyway; a handler copied next
// to another client keeps its bound.
const guardTimeout = time.Second

// guardContext returns the context of one call to the guard for r: not
// r.Context(), which net/http cancels when the client closes its side of
// the connection, so that a guess whose Failure then failed would not
// count (the client can still read the answer on a half-closed
// connection), but its values with a deadline of its own, guardTimeout.
func guardContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), guardTimeout)
}

// invalidUsername returns the detail of the answer to a username the
// guard refused (err wraps ErrInvalidAccount): that one is required when
// none was sent, else why this one is refused, in loginguard's words
// ("invalid username: not valid UTF-8", "... 1025 bytes, at most 1024",
// "... empty once invisible characters ... are dropped").
func invalidUsername(user string, err error) string {
	if user == "" {
		return "a username is required"
	}
	reason := strings.TrimPrefix(err.Error(), loginguard.ErrInvalidAccount.Error()+": ")
	return "invalid username: " + reason
}

// passwordMatches hashes password in every case, against the user's hash
// or, for an unknown name, a dummy one, and compares in constant time.
func (s *server) passwordMatches(user, password string) bool {
	want, known := s.dummy, false
	if name, err := loginguard.NormalizeAccount(user); err == nil {
		if h, ok := s.users[name]; ok {
			want, known = h, true
		}
	}
	got, err := s.hash(password)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(got, want) == 1 && known
}

// unavailable fails closed when the guard's store fails.
func (s *server) unavailable(w http.ResponseWriter, err error) {
	if errors.Is(err, floodgate.ErrClusterRedirect) {
		s.cfg.Logger.Error("login: guard unavailable: -redis is the address of a Redis Cluster node; give the cluster's nodes to -redis-cluster instead", "error", err)
	} else {
		s.cfg.Logger.Warn("login: guard unavailable", "error", err)
	}
	problem(w, http.StatusServiceUnavailable, "login is temporarily unavailable", time.Second)
}

func reply(w http.ResponseWriter, status int, body loginResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// problem writes an RFC 9457 body; retry > 0 adds Retry-After in whole
// seconds, rounded up.
func problem(w http.ResponseWriter, status int, detail string, retry time.Duration) {
	body := map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail}
	if retry > 0 {
		secs := int64((retry + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		body["retry_after"] = secs
	}
	w.Header().Set("Content-Type", httplimit.ProblemContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// shutdownTimeout bounds a graceful stop.
const shutdownTimeout = 5 * time.Second

// serve runs srv until ctx is done, then shuts it down gracefully.
func serve(ctx context.Context, srv *http.Server) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return srv.Shutdown(sctx)
}
