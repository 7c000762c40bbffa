// Package sentinelfollow keeps a go-redis Sentinel client on the primary
// that a majority of the sentinels name.
//
// go-redis's failover client asks one sentinel, and leaves the old primary
// when that sentinel publishes +switch-master. The sentinel that leads a
// failover publishes it only when the failover ends: after it has
// reconfigured every replica, or after failover-timeout. Until then a
// client attached to the leader goes on writing to the old primary, which
// answers as a primary until the sentinels demote it, and what it was sent
// in those seconds is lost when it resynchronises from the new one (an
// outside walk measured 5 s after a SENTINEL FAILOVER, and a third of a
// quota's charges answered 200 and lost).
//
// A Follower asks every configured sentinel where the primary is, every
// Interval and at once when any of them publishes +switch-master (the
// leader answers with the promoted replica as soon as it starts
// reconfiguring; the others within milliseconds of the promotion). When a
// majority of the configured sentinels names another primary than the one
// it followed, the connections to the one it left fail go-redis's health
// check when next taken from the pool, so go-redis dials again, and a dial
// that go-redis would still send to the left primary goes to the new one.
//
// A client made with NewClient also takes the primary's address for every
// new connection from the Follower, once a majority has named one, instead
// of asking a sentinel at each dial as go-redis does. Without a majority
// answering (most sentinels unreachable, or frozen) nothing moves: new
// connections go on to the primary the majority named last, at once. A
// go-redis failover client alone asked its sentinel, and with the
// sentinels frozen every new connection failed after the command's whole
// deadline, although the primary was healthy (an outside walk: 100% of
// the decisions failed, 1 s each, once the primary's connections were
// dropped). Before the first majority, and while Run is not running,
// go-redis asks the sentinels itself; a client that only reads can dial
// the primary named by the sentinels that answer instead (DialMinority).
package sentinelfollow

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/connsetup"
	"github.com/floodgate-rl/floodgate/internal/oneline"
)

// Interval is how often a Follower asks the sentinels when none has
// published a switch.
const Interval = time.Second

// askTimeout bounds one round of questions to the sentinels.
const askTimeout = 500 * time.Millisecond

// errLeft is the health-check failure of a connection to a primary the
// sentinels no longer name.
var errLeft = errors.New("sentinelfollow: the sentinels name another primary")

// Follower follows the primary named by a majority of sentinels; see the
// package documentation.
type Follower struct {
	master    string
	sentinels []string
	opts      func(addr string) *redis.Options
	dialer    func(ctx context.Context, network, addr string) (net.Conn, error)
	kick      chan struct{}

	// asked is closed when a Run's first round of questions has ended
	// (Asked); askedOnce closes it.
	asked     chan struct{}
	askedOnce sync.Once
	// counted is closed when a round's answers were first counted for
	// Status (WaitAsked); countedOnce closes it.
	counted     chan struct{}
	countedOnce sync.Once

	// steer is what the client's dials and health checks read, without
	// a lock (a check runs at every connection taken from the pool): nil
	// while nothing was left or Run is not running.
	steer atomic.Pointer[steering]

	// runs counts the Runs running: a client made with NewClient dials
	// the current primary only while one is.
	runs atomic.Int32

	mu      sync.Mutex
	current string              // the primary a majority named last; "" before the first answer, or once a majority no longer knows the master
	left    map[string]struct{} // every primary left since, until named again
	onMove  func(from, to string)
	blind   bool // the last round had no majority answering
	named   bool // a majority has named a primary since the start
	// forgotten is set while a majority answers that they do not
	// monitor the master (forget): the warning is logged once.
	forgotten bool

	// minority is the primary every sentinel that answered the last
	// round named, when no majority answered and at least one did; ""
	// otherwise. minorityDials (DialMinority) makes a client made with
	// NewClient dial it while no majority has named one.
	minority      string
	minorityDials bool
	// minorityDialed holds every primary a minority named while none was
	// current and minorityDials was set (the client may have dialed it),
	// lastDialed the last of them, until a majority names one.
	minorityDialed map[string]struct{}
	lastDialed     string

	// primaryDials is set by NewClient: the client dials the current
	// primary.
	primaryDials bool

	errMu sync.Mutex
	errs  map[string]nodeErr // by address: the last failure met there

	// round numbers check's rounds; tallied is the latest round whose
	// answers answering and majority count (under mu).
	round         atomic.Uint64
	tallied       uint64
	answering     int
	majority      bool
	unknownMaster bool
}

// Status is what a Follower's last round of questions found (Status).
type Status struct {
	// Sentinels is how many sentinels the Follower asks (those it was
	// given).
	Sentinels int
	// Answering is how many of them answered the last round: with the
	// primary's address, or saying they do not know the master. A
	// round that decided as soon as a majority agreed counts the others'
	// answers as they come, within half a second. 0 before the first
	// round ends.
	Answering int
	// Majority reports whether a majority of them named one primary in
	// the last round. False while they do not answer: a failover is not
	// followed until they do (new connections go on to Primary, the one
	// named last); false before the first round ends, and while
	// UnknownMaster, too.
	Majority bool
	// UnknownMaster reports whether a majority of them answered the
	// last round that they do not monitor the master (SENTINEL
	// GET-MASTER-ADDR-BY-NAME answered nil: a wrong master name, or
	// SENTINEL REMOVE). They answer, so Answering counts them; the
	// primary is forgotten (Primary is ""), and go-redis asks the
	// sentinels at each new connection: it goes to the primary a
	// sentinel that still monitors the master names, and fails when
	// none does.
	UnknownMaster bool
	// Primary is Primary's answer: the primary a majority named last, ""
	// while UnknownMaster.
	Primary string
	// Asked reports whether the answers of a round of questions have
	// been counted. Before, the other fields tell nothing of the
	// sentinels yet: Majority is false because none was asked.
	Asked bool
}

// Status returns what the last round of questions to the sentinels found.
// It is safe for concurrent use; metrics and readiness read it (an
// outside walk stopped every sentinel: the service went on deciding on
// the primary, and only a log line said that a failover would not be
// followed).
func (f *Follower) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Status{Sentinels: len(f.sentinels), Answering: f.answering, Majority: f.majority, UnknownMaster: f.unknownMaster, Primary: f.current, Asked: f.tallied > 0}
}

// tally records that answering sentinels answered round, whether a
// majority named one primary, and whether a majority answered that they
// do not know the master, unless a later round was tallied already.
func (f *Follower) tally(round uint64, answering int, majority, unknownMaster bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if round < f.tallied {
		return
	}
	f.tallied, f.answering, f.majority, f.unknownMaster = round, answering, majority, unknownMaster
	f.countedOnce.Do(func() { close(f.counted) })
}

// nodeErr is a failure met at an address, and when.
type nodeErr struct {
	err error
	at  time.Time
}

// steering is a snapshot of the primaries left, the one to go to instead,
// and until when the snapshot holds (staleAfter after the majority's
// answer it was made from).
type steering struct {
	left  map[string]struct{}
	to    string
	until time.Time
}

// New returns a Follower for the failover client o describes, and sets
// o.Dialer so that the client's connections follow it. Call it before
// redis.NewFailoverClient(o), and run Run for as long as the client is
// used; without Run, the client behaves as go-redis alone makes it.
// Such a client still asks a sentinel for the primary at each new
// connection; NewClient's does not.
func New(o *redis.FailoverOptions) *Follower {
	f := &Follower{
		master:    o.MasterName,
		sentinels: append([]string(nil), o.SentinelAddrs...),
		kick:      make(chan struct{}, 1),
		asked:     make(chan struct{}),
		counted:   make(chan struct{}),
		left:      map[string]struct{}{},
		errs:      map[string]nodeErr{},

		minorityDialed: map[string]struct{}{},
	}
	tc, timeout := o.TLSConfig, o.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	base := o.Dialer
	if base == nil {
		base = func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
			if tc == nil {
				return d.DialContext(ctx, network, addr)
			}
			// As go-redis's own dialer: the server name, when the
			// configuration has none, is the address's host.
			return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, network, addr)
		}
	}
	f.dialer = base
	user, pass := o.SentinelUsername, o.SentinelPassword
	f.opts = func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, Username: user, Password: pass, TLSConfig: tc, DialTimeout: timeout,
			ReadTimeout: askTimeout, WriteTimeout: askTimeout, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2}
	}
	o.Dialer = f.dial
	return f
}

// NewClient returns redis.NewFailoverClient(o) and the Follower its
// connections follow (New(o), called first). Besides what New does, the
// client's new connections to the primary go to the one the Follower
// holds (Primary) while Run runs and a majority has answered once: the
// sentinels are not asked at each dial, so a dial does not wait for
// sentinels that cannot answer. Before that, the client asks the
// sentinels as go-redis does. A client that dials replicas only
// (o.ReplicaOnly) is left to go-redis.
func NewClient(o *redis.FailoverOptions) (*redis.Client, *Follower) {
	f := New(o)
	c := redis.NewFailoverClient(o)
	c.AddHook(oneLineHook{})
	if !o.ReplicaOnly {
		f.primaryDials = true
		c.AddHook(primaryHook{f})
	}
	return c, f
}

// oneLineHook is the outermost hook of NewClient's client: a dial's
// error is put on one line (oneline.Error). go-redis joins the failures
// of every sentinel it asked with newlines, which broke readiness's JSON
// and every log line that quoted them.
type oneLineHook struct{}

func (oneLineHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		return c, oneline.Error(err)
	}
}

func (oneLineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (oneLineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// primaryHook is the hook of NewClient's client: it dials the primary
// the Follower holds, while it is known, instead of letting go-redis ask
// a sentinel for it.
type primaryHook struct{ f *Follower }

func (h primaryHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p := h.f.following(); p != "" {
			return h.f.dial(ctx, network, p)
		}
		return next(ctx, network, addr)
	}
}

func (primaryHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (primaryHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// following returns the primary a client made with NewClient dials: the
// current one while Run runs, or with DialMinority the one the sentinels
// that answered named while none is current; "" otherwise, and go-redis
// asks a sentinel.
func (f *Follower) following() string {
	if f.runs.Load() == 0 {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current == "" && f.minorityDials {
		return f.minority
	}
	return f.current
}

// DialMinority makes a client made with NewClient, while no majority of
// the sentinels has named a primary since Run started, dial the one that
// every sentinel that answered the last round named (at least one
// answered, and they agree) instead of asking the sentinels as go-redis
// does, which waits for every sentinel, a frozen one's answer included,
// until the command's deadline. It is for a client that only reads
// (floodgate doctor's audit): a minority of the sentinels may name a
// primary the majority has since demoted, and writes sent there would be
// lost, so serve does not call it. When a majority then names another
// primary, the client leaves each one the minority named, as it leaves
// the current one in a failover: its connections there are dropped, its
// dials go to the majority's, and OnMove's function is called (from the
// last one the minority named). Call it before Run.
func (f *Follower) DialMinority() {
	f.mu.Lock()
	f.minorityDials = true
	f.mu.Unlock()
}

// OnMove sets a function called, from Run's goroutine, each time the
// Follower leaves a primary for another (Run logs the move as a warning
// otherwise).
func (f *Follower) OnMove(fn func(from, to string)) {
	f.mu.Lock()
	f.onMove = fn
	f.mu.Unlock()
}

// Master returns the master name the Follower asks the sentinels for
// (the failover options' MasterName).
func (f *Follower) Master() string { return f.master }

// Primary returns the primary a majority of the sentinels named last, or
// "" before any answer and once a majority answered that they do not know
// the master.
func (f *Follower) Primary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

// Run asks the sentinels every Interval, and at once on a +switch-master
// from any of them, until ctx ends. Failures to reach a sentinel are not
// logged (the client's own logs and the breaker say when Redis cannot be
// reached), but kept for NodeErrors.
func (f *Follower) Run(ctx context.Context, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f.runs.Add(1)
	defer f.runs.Add(-1)
	defer f.steer.Store(nil) // without Run, the client is go-redis's alone
	f.mu.Lock()
	if f.onMove == nil {
		f.onMove = func(from, to string) {
			log.Warn("the sentinels name a new Redis primary: connections to the old one are dropped", "master", f.master, "old", from, "new", to)
		}
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, addr := range f.sentinels {
		sc := f.sentinelClient(addr)
		wg.Go(func() {
			defer sc.Close()
			// Subscribed here, not before the first round: Subscribe
			// waits for the sentinel's answer, up to askTimeout for a
			// frozen one, and one after the other they held the first
			// round back 1.5 s with three frozen (a review).
			ps := sc.Subscribe(ctx, "+switch-master")
			defer ps.Close()
			ch := ps.Channel()
			for {
				select {
				case <-ctx.Done():
					return
				case m, ok := <-ch:
					if !ok {
						return
					}
					// "<name> <old ip> <old port> <new ip> <new port>"
					if name, _, _ := strings.Cut(m.Payload, " "); name == f.master {
						f.Kick()
					}
				}
			}
		})
	}
	clients := make([]*redis.SentinelClient, len(f.sentinels))
	for i, addr := range f.sentinels {
		clients[i] = f.sentinelClient(addr)
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
		wg.Wait()
	}()
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		f.check(ctx, clients, log)
		f.askedOnce.Do(func() { close(f.asked) })
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.kick:
		}
	}
}

// sentinelClient returns a client of Run for the sentinel at addr, with
// connsetup's hook: a sentinel at its maxclients limit, which closes each
// new connection as it accepts it, is reported as such (NodeErrors), not
// as a bare "write: broken pipe".
func (f *Follower) sentinelClient(addr string) *redis.SentinelClient {
	sc := redis.NewSentinelClient(f.opts(addr))
	sc.AddHook(connsetup.Hook{})
	return sc
}

// Asked returns a channel closed once a Run has asked the sentinels a
// first time: then either Primary holds the primary a majority named, and
// a client made with NewClient dials it without asking a sentinel, or no
// majority named one (a round ends within half a second), and the client
// asks them itself as go-redis does, or with DialMinority dials the
// primary the sentinels that answered named. A caller that sends its first
// command at once (floodgate doctor's probe) waits for it, so that the
// dial does not go through go-redis's questions, which wait for every
// sentinel's answer, a frozen one's included. The channel stays open
// while no Run has finished a round.
func (f *Follower) Asked() <-chan struct{} { return f.asked }

// WaitAsked waits until the answers of a Run's first round of questions
// have been counted (Status.Asked), ctx ends, or twice the time a round
// may take has passed, and reports whether they were. A service waits for it before it
// listens, so that its first readiness answer and metrics tell what the
// sentinels said, not that none was asked yet.
func (f *Follower) WaitAsked(ctx context.Context) bool {
	t := time.NewTimer(2 * askTimeout)
	defer t.Stop()
	select {
	case <-f.counted:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Kick makes Run ask the sentinels now.
func (f *Follower) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// check asks every sentinel at once and moves to the primary a majority
// of them names, if it is another than the current one. It decides as
// soon as a majority agrees: a sentinel that is frozen (connections open,
// nothing answered) would otherwise hold every move up by askTimeout.
// A majority answering that they do not know the master makes it forget
// the current primary, and the first such round is logged as a warning.
// Any other round without a majority changes nothing; the first after
// one with is logged as a warning, naming what each sentinel failed with, and a
// sentinel that did not answer in time is recorded for NodeErrors. Each
// round's count of answers is recorded for Status.
func (f *Follower) check(ctx context.Context, clients []*redis.SentinelClient, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	round := f.round.Add(1)
	rctx, cancel := context.WithTimeout(ctx, askTimeout)
	answers := make(chan answer, len(clients))
	for i, c := range clients {
		go func() {
			v, err := c.GetMasterAddrByName(rctx, f.master).Result()
			if err != nil && rctx.Err() == nil {
				f.record(f.sentinels[i], err)
			}
			switch {
			case err != nil:
				answers <- answer{i: i, err: err}
			case len(v) != 2:
				answers <- answer{i: i, err: fmt.Errorf("answered %q, not a host and port", v)}
			default:
				answers <- answer{i: i, addr: net.JoinHostPort(v[0], v[1])}
			}
		}()
	}
	named := ""
	forgot := false
	count := map[string]int{}
	unknown := 0  // sentinels that answered they do not know the master
	answered := 0 // sentinels that answered either
	failed := make([]error, len(clients))
	n := 0 // answers read
	for n < len(clients) && named == "" && !forgot {
		a := <-answers
		n++
		if a.answered() {
			answered++
		}
		if errors.Is(a.err, redis.Nil) {
			if unknown++; 2*unknown > len(f.sentinels) {
				forgot = true
				continue
			}
		}
		if a.addr == "" {
			failed[a.i] = a.err
			continue
		}
		if count[a.addr]++; 2*count[a.addr] > len(f.sentinels) {
			named = a.addr
		}
	}
	if named != "" || forgot {
		// At once, before the move: the round is decided.
		f.tally(round, answered, named != "", forgot)
	}
	var then func(unknown, monitoring int)
	switch {
	case forgot:
		then = f.forget(ctx, log)
	case named == "":
		f.noMajority(ctx, failed, count, log)
	default:
		f.majorityNamed(named, log)
	}
	// The answers not read yet are counted as they come, without
	// holding up the move.
	monitoring := 0
	for _, c := range count {
		monitoring += c
	}
	go f.tallyRest(ctx, round, roundCount{answered, unknown, monitoring}, named != "", forgot, answers, len(clients)-n, cancel, then)
}

// roundCount counts a round's answers: every one, those saying that the
// sentinel does not know the master, and those naming a primary.
type roundCount struct{ answered, unknown, monitoring int }

// answer is one sentinel's answer to check's question.
type answer struct {
	i    int
	addr string // "" when err is set or the answer is not an address
	err  error
}

// answered reports whether the sentinel answered: with an address, or
// saying it does not know the master (redis.Nil).
func (a answer) answered() bool { return a.addr != "" || errors.Is(a.err, redis.Nil) }

// tallyRest records round's count (tally): n, and the left answers
// still to come from answers (each bounded by askTimeout) once check has
// decided without them; then it calls cancel, which ends the round's
// questions, and then, if set, with the whole round's counts. A round
// cut short by the end of ctx (Run's) is not recorded: its failures are
// Run's own.
func (f *Follower) tallyRest(ctx context.Context, round uint64, n roundCount, majority, unknownMaster bool, answers <-chan answer, left int, cancel context.CancelFunc, then func(unknown, monitoring int)) {
	defer cancel()
	for range left {
		a := <-answers
		if a.answered() {
			n.answered++
		}
		if errors.Is(a.err, redis.Nil) {
			n.unknown++
		}
		if a.addr != "" {
			n.monitoring++
		}
	}
	if ctx.Err() != nil {
		return
	}
	f.tally(round, n.answered, majority, unknownMaster)
	if then != nil {
		then(n.unknown, n.monitoring)
	}
}

// majorityNamed moves to named, the primary a majority of the sentinels
// named, from the current one, or, while none is current, from the one
// a minority named last that the client dialed (DialMinority): that
// primary is left as the current one is, so that the client's pooled
// connections to it are dropped and its dials go to named, and OnMove's
// function is called.
func (f *Follower) majorityNamed(named string, log *slog.Logger) {
	f.mu.Lock()
	from := f.current
	if from == "" {
		// The client dialed each primary a minority named while no
		// majority had (DialMinority), and may hold connections to it.
		for m := range f.minorityDialed {
			if m != named {
				f.left[m] = struct{}{}
			}
		}
		if f.lastDialed != named {
			from = f.lastDialed
		}
	}
	clear(f.minorityDialed)
	f.lastDialed = ""
	moved := from != "" && from != named
	if moved {
		f.left[from] = struct{}{}
	}
	delete(f.left, named)
	f.current = named
	f.minority = ""
	if len(f.left) == 0 {
		f.steer.Store(nil)
	} else {
		f.steer.Store(&steering{left: maps.Clone(f.left), to: named, until: time.Now().Add(staleAfter)})
	}
	onMove := f.onMove
	wasBlind, wasForgotten, first := f.blind, f.forgotten, !f.named
	f.blind, f.forgotten, f.named = false, false, true
	f.mu.Unlock()
	// At warn, as the line each ends: a service logging at warn
	// (envoy-compat's default) showed the alarm and never the all-clear
	// (a walk).
	switch {
	case wasBlind && first:
		// They had not answered since the start: not "again" (a walk).
		log.Warn("a majority of the sentinels answers, for the first time since the start", "master", f.master, "primary", named)
	case wasBlind:
		log.Warn("a majority of the sentinels answers again", "master", f.master, "primary", named)
	case wasForgotten:
		log.Warn("a majority of the sentinels monitors the Redis master again", "master", f.master, "primary", named)
	}
	if moved && onMove != nil {
		onMove(from, named)
	}
}

// forget drops the current primary when a majority of the sentinels
// (unknown of them) answer that they do not know the master (a wrong
// master name, or SENTINEL REMOVE): new connections are then left to
// go-redis, which asks the sentinels at each one, and not sent to a
// server the majority no longer vouches for. go-redis dials the primary
// a sentinel that still monitors the master names (a minority), and
// fails, saying that the sentinels do not know the master, when none
// does. The first such round is logged as a warning, once every
// sentinel's answer is in (within askTimeout), so that it counts them
// all: forget returns the function that logs it, nil for a round that
// is not the first.
func (f *Follower) forget(ctx context.Context, log *slog.Logger) (then func(unknown, monitoring int)) {
	f.mu.Lock()
	primary, wasForgotten := f.current, f.forgotten
	f.current = ""
	f.minority = ""
	f.blind = false
	f.forgotten = true
	f.mu.Unlock()
	if wasForgotten || ctx.Err() != nil {
		return nil
	}
	return func(unknown, monitoring int) {
		log.Warn("a majority of the sentinels answer that they do not monitor the Redis master: its primary is forgotten, and each new connection goes to the primary a sentinel that still monitors it names, or fails when none does (check --redis-master against SENTINEL MASTERS, or SENTINEL MONITOR it again)",
			"master", f.master, "unknown_to", unknown, "monitoring", monitoring, "sentinels", len(f.sentinels), "forgotten", primary)
	}
}

// noMajority handles a round of check in which no majority of the
// sentinels named one primary: failed holds each sentinel's failure (nil
// for one that answered), count the answers by primary named.
func (f *Follower) noMajority(ctx context.Context, failed []error, count map[string]int, log *slog.Logger) {
	if ctx.Err() != nil {
		return // Run is ending: nothing failed
	}
	var reasons []string
	for i, err := range failed {
		if err == nil {
			continue
		}
		if ne := net.Error(nil); errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			err = fmt.Errorf("no answer within %v: %w", askTimeout, err)
			f.record(f.sentinels[i], err)
		} else if errors.Is(err, redis.Nil) {
			// An answer, not a failure: it does not monitor the master.
			reasons = append(reasons, fmt.Sprintf("sentinel %s: does not monitor the master", f.sentinels[i]))
			continue
		}
		reasons = append(reasons, fmt.Sprintf("sentinel %s: %v", f.sentinels[i], err))
	}
	for _, a := range slices.Sorted(maps.Keys(count)) {
		reasons = append(reasons, fmt.Sprintf("%d named %s", count[a], a))
	}
	minority := ""
	if len(count) == 1 {
		for a := range count {
			minority = a
		}
	}
	f.mu.Lock()
	wasBlind, primary, minorityDials := f.blind, f.current, f.minorityDials
	f.blind, f.forgotten = true, false
	f.minority = minority
	if primary == "" && minority != "" && minorityDials {
		f.minorityDialed[minority] = struct{}{}
		f.lastDialed = minority
	}
	f.mu.Unlock()
	if wasBlind {
		return
	}
	if primary == "" && minority != "" && f.primaryDials && minorityDials {
		log.Warn("no majority of the sentinels answered: new connections go to the Redis primary named by those that did",
			"master", f.master, "primary", minority, "sentinels", len(f.sentinels), "failures", strings.Join(reasons, "; "))
		return
	}
	if primary == "" || !f.primaryDials {
		log.Warn("no majority of the sentinels answered: go-redis asks them for the Redis primary at each new connection",
			"master", f.master, "primary", primary, "sentinels", len(f.sentinels), "failures", strings.Join(reasons, "; "))
		return
	}
	log.Warn("no majority of the sentinels answered: new connections go on to the Redis primary they last named, and a failover is not followed until they answer",
		"master", f.master, "primary", primary, "sentinels", len(f.sentinels), "failures", strings.Join(reasons, "; "))
}

// dial is the client's dialer: go-redis passes the address its sentinel
// names. A dial to the primary the Follower left goes to the one a
// majority names instead: go-redis's sentinel has not switched yet.
func (f *Follower) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if s := f.steering(); s != nil {
		if _, left := s.left[addr]; left {
			addr = s.to
		}
	}
	c, err := f.dialer(ctx, network, addr)
	if err != nil {
		f.record(addr, err)
		return nil, err
	}
	out := &conn{Conn: c, addr: addr, f: f}
	if !slices.Contains(f.sentinels, addr) {
		out.setup.Store(setUp) // the client's own hooks see its setup
	}
	return out, nil
}

// record notes err as the last failure met at addr. A connection reset
// or broken pipe does not replace a failure noted less than staleAfter
// before: it is most often that failure's echo (a server that refused a
// TLS client with an alert closes the connection, and the client's next
// write is reset), and the first says why; unless it is a new
// connection's setup failure (*connsetup.Error) and that one is not,
// which says more.
func (f *Follower) record(addr string, err error) {
	now := time.Now()
	f.errMu.Lock()
	defer f.errMu.Unlock()
	var setup *connsetup.Error
	if old, ok := f.errs[addr]; ok && now.Sub(old.at) < staleAfter &&
		(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) &&
		(!errors.As(err, &setup) || errors.As(old.err, &setup)) {
		return
	}
	f.errs[addr] = nodeErr{err: err, at: now}
}

// NodeErrors returns, for each address whose last failure was met at or
// after since, that failure as "sentinel ADDR: ERROR" or "ADDR: ERROR"
// (a primary or replica), sentinels first, each group in address order;
// nil when there is none. A failure is a dial's, a read's or a write's
// on the client's connections (go-redis's questions to the sentinels
// included), other than a timeout or a close of the client's own; or an
// error of Run's questions to the sentinels. Every error returned wraps
// the failure (errors.Is finds io.EOF in it).
//
// NodeErrors is safe for concurrent use. It is what readiness adds to a
// failed probe: go-redis's own error behind Sentinel is often its
// deadline, or says what failed but not where.
func (f *Follower) NodeErrors(since time.Time) []error {
	f.errMu.Lock()
	addrs := make([]string, 0, len(f.errs))
	for a, e := range f.errs {
		if !e.at.Before(since) {
			addrs = append(addrs, a)
		}
	}
	errs := maps.Clone(f.errs)
	f.errMu.Unlock()
	isSentinel := func(a string) bool { return slices.Contains(f.sentinels, a) }
	slices.SortFunc(addrs, func(a, b string) int {
		if sa, sb := isSentinel(a), isSentinel(b); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var out []error
	for _, a := range addrs {
		name := a
		if isSentinel(a) {
			name = "sentinel " + a
		}
		out = append(out, fmt.Errorf("%s: %w", name, errs[a].err))
	}
	return out
}

// steering returns the steering in force: one made while Run runs, from
// a majority's answer within staleAfter; nil otherwise, and the client is
// then as go-redis alone makes it.
func (f *Follower) steering() *steering {
	s := f.steer.Load()
	if s == nil || time.Now().After(s.until) {
		return nil
	}
	return s
}

// isLeft reports whether addr is a primary the steering in force left.
func (f *Follower) isLeft(addr string) bool {
	s := f.steering()
	if s == nil {
		return false
	}
	_, ok := s.left[addr]
	return ok
}

// staleAfter is how long a majority's answer steers the client.
const staleAfter = 3 * Interval

// conn is a connection of the client, to addr.
type conn struct {
	net.Conn
	addr string
	f    *Follower

	// setup is where a connection to a sentinel is in its setup: settingUp,
	// refused or setUp (a connection to another server is setUp).
	setup atomic.Int32
}

// The states of a connection's setup (conn.setup).
const (
	settingUp int32 = iota // nothing read yet
	refused                // what was read first is the maxclients refusal
	setUp                  // something else was read first
)

// maxclientsRefusal is how Redis, a sentinel included, starts what it
// writes to a connection it refuses at its maxclients limit.
var maxclientsRefusal = []byte("-ERR max number of clients")

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.setup.Load() == settingUp {
		if bytes.HasPrefix(b[:n], maxclientsRefusal) {
			c.setup.Store(refused)
		} else {
			c.setup.Store(setUp)
		}
	}
	return n, c.note(err)
}

func (c *conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	return n, c.note(err)
}

// note records a read's or write's failure, other than a timeout (a
// subscription waits out deadlines on a healthy sentinel) or the client's
// own close, and returns it. The failure of a connection to a sentinel
// before anything but Redis's maxclients refusal was read from it is
// returned, and recorded, as a *connsetup.Error: go-redis asks the
// sentinels for the primary with clients of its own, which carry none of
// this client's hooks (connsetup.Hook), and a sentinel at its maxclients
// limit, which closes each new connection as it accepts it, made the
// dial fail with a bare "write: broken pipe".
func (c *conn) note(err error) error {
	var ne net.Error
	if err == nil || errors.Is(err, net.ErrClosed) || (errors.As(err, &ne) && ne.Timeout()) {
		return err
	}
	if c.setup.Load() != setUp {
		// One more layer, as connsetup.Hook adds: go-redis (v9.23
		// initPooledConn) returns errors.Unwrap of a setup's failure.
		err = fmt.Errorf("%w", &connsetup.Error{Err: err})
	}
	c.f.record(c.addr, err)
	return err
}

// SyscallConn is what go-redis's pool checks an idle connection with
// before handing it out: a connection to a primary the Follower left
// fails it, and is closed. Other connections are checked as go-redis
// checks them unwrapped: a TCP connection by peeking at its socket, a TLS
// one not at all.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if c.f.isLeft(c.addr) {
		return nil, errLeft
	}
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return unchecked{}, nil
}

// unchecked is the RawConn of a connection go-redis does not check: its
// Read runs nothing and reports no error.
type unchecked struct{}

func (unchecked) Control(func(fd uintptr)) error    { return nil }
func (unchecked) Read(func(fd uintptr) bool) error  { return nil }
func (unchecked) Write(func(fd uintptr) bool) error { return nil }
