package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/redis/go-redis/v9"
)

// releaseMarkerTTL is how long a release's marker lives: a second release
// with the same marker within that time changes nothing. Markers are only
// written on the release path (a split decision that some slot denied), so
// their number is bounded by the rate of such denials times this TTL.
const releaseMarkerTTL = 10 * time.Second

// laterReleaseTimeout bounds a release sent in the background (see
// releaseLater): the call's context had ended before the release was
// sent, so it is sent with a context of its own, which keeps the call's
// values but not its cancellation, and ends after this long. The caller
// does not wait for it.
const laterReleaseTimeout = time.Second

// maxLaterReleases is the most releases a Store has in the background at
// once; a release beyond it is not sent, and counts as a failed release.
// It bounds the goroutines and connections that releases to a slow primary
// can hold: at most laterReleaseTimeout each.
const maxLaterReleases = 64

// slotGroups partitions the layers of one call by Redis Cluster slot, in
// order of first appearance.
type slotGroups struct {
	n    int                        // number of groups
	of   [floodgate.MaxLayers]uint8 // group of each layer
	slot [floodgate.MaxLayers]int   // slot of each group
}

// split fills g from layers and reports whether they span several slots.
func (g *slotGroups) split(layers []floodgate.Layer) bool {
	g.n = 0
	for i := range layers {
		sl := Slot(layers[i].Key)
		j := 0
		for j < g.n && g.slot[j] != sl {
			j++
		}
		if j == g.n {
			g.slot[j] = sl
			g.n++
		}
		g.of[i] = uint8(j)
	}
	return g.n > 1
}

// part is one slot's share of a split decision.
type part struct {
	slot   int
	idx    []int // positions of its layers in the call
	layers []floodgate.Layer
	out    []floodgate.Result
	undo   [][undoWidth]int64
	err    error // the reserve failed (wraps ErrStoreUnavailable or ErrIndeterminate)
	sent   bool  // the reserve was sent
	held   bool  // the reserve admitted and wrote: the part holds a reservation
	relErr error // the release of a held reservation failed
	later  bool  // the release was sent in the background (releaseLater)
}

// decideSplit decides a call whose keys span several slots: phase 1
// reserves every part concurrently; if every part admitted, that is the
// decision. Otherwise phase 2 releases every part that committed, and the
// parts' results (with the released layers' standing) are the decision, or,
// if some part failed, an error that says whether anything may be kept.
func (s *Store) decideSplit(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result, g *slotGroups, queues bool) error {
	// Each part's slices are windows on shared arrays, in group order.
	parts := make([]part, g.n)
	var n [floodgate.MaxLayers]int
	for i := range layers {
		n[g.of[i]]++
	}
	idx := make([]int, len(layers))
	ls := make([]floodgate.Layer, len(layers))
	outs := make([]floodgate.Result, len(layers))
	undo := make([][undoWidth]int64, len(layers))
	at := 0
	for j := range parts {
		p := &parts[j]
		p.slot = g.slot[j]
		p.idx, p.layers, p.out, p.undo = idx[at:at:at+n[j]], ls[at:at:at+n[j]], outs[at:at+n[j]], undo[at:at+n[j]]
		at += n[j]
	}
	for i := range layers {
		p := &parts[g.of[i]]
		p.idx = append(p.idx, i)
		p.layers = append(p.layers, layers[i])
	}
	for i := range parts {
		if _, err := markerKey(parts[i].layers[0].Key, 0); err != nil {
			return err
		}
	}
	if s.inflight != nil {
		for i := range parts {
			s.inflight[parts[i].slot].Add(1)
		}
		defer func() {
			for i := range parts {
				s.inflight[parts[i].slot].Add(-1)
			}
		}()
	}
	// Phase 1 reserves every part but the last, concurrently; phase 2 the
	// last, only if they all admitted. The last part's reservation is
	// never released for want of another part, so it never holds capacity
	// for a request that is denied anyway: it goes to the part most
	// decisions share (the global layer), whose capacity is the one
	// concurrent doomed reservations would waste.
	var lp *part // nil with SplitConcurrent: every part at once
	if !s.concurrent {
		lp = &parts[s.lastPart(parts)]
	}
	// The reservations (and the probe) are sent under sctx, which ends
	// when the caller goes (Store.bind, see decideDirect): a part not
	// sent by then is not sent, nor is the probe, whose answer nobody
	// would read (its error wraps context.Canceled, see probe). The
	// releases are sent under ctx: what a gone caller's parts hold is
	// given back all the same.
	sctx, stop, err := s.bind(ctx)
	if err != nil {
		return goneError(err)
	}
	defer stop()
	each(parts, func(p *part) bool { return p != lp }, func(p *part) {
		if !queues || !s.reserveOnNode(sctx, now, p) {
			s.reserve(sctx, now, p)
		}
	})
	failed, denied := splitState(parts)
	sent := !failed && !denied
	if sent && lp != nil {
		if !queues || !s.decideLast(sctx, now, lp) {
			s.reserve(sctx, now, lp)
		}
		failed, denied = splitState(parts)
	}
	if failed || denied {
		// Release what was held; when the last part was not sent and the
		// decision is a denial, ask it for its results (a probe writes
		// nothing), in the same round trip.
		probe := lp != nil && !sent && !failed
		each(parts, func(p *part) bool { return p.held || probe && p == lp }, func(p *part) {
			if p == lp && probe {
				s.probe(sctx, now, p)
				return
			}
			if ended(ctx) {
				s.releaseLater(ctx, now, p)
				return
			}
			s.release(ctx, now, p, rand.Uint64())
		})
		for i := range parts {
			if p := &parts[i]; p.relErr != nil {
				s.releaseFailed(p.slot, p.relErr)
			}
		}
		if !failed && lp != nil && lp.err != nil {
			failed = true
		}
	}
	if failed {
		return splitError(parts)
	}
	for i := range parts {
		p := &parts[i]
		for k, j := range p.idx {
			out[j] = p.out[k]
		}
	}
	return nil
}

// ended reports whether ctx has ended, or its deadline has passed (a
// command sent now would fail at once, as go-redis takes the deadline for
// the connection's).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// releaseFailed counts the failed release of the part in slot and reports
// it to Options.OnReleaseFailure.
func (s *Store) releaseFailed(slot int, err error) {
	s.releaseFailures.Add(1)
	if s.onReleaseFailure != nil {
		s.onReleaseFailure(fmt.Errorf("slot %d: %w", slot, err))
	}
}

// releaseLater sends p's release in the background, for a call whose
// context ended before the release was sent (a timeout in another part,
// typically): sent with ctx, it would fail at once without being sent, and
// p's layers would keep the reservation of a request that was not admitted.
// Nothing of this release has been sent, so sending it now sends it once.
// The background release has a context of its own (ctx's values, not its
// cancellation, and laterReleaseTimeout), works on its own copies of p's
// layers and undo records, and counts a failure as release does (see
// releaseFailed); the caller does not wait for it (WaitReleases does). p
// is marked later, and reports what the reservation left as its layers'
// standings, as a failed release does. When maxLaterReleases are in the background already,
// nothing is sent: p.relErr says so.
func (s *Store) releaseLater(ctx context.Context, now int64, p *part) {
	for k := range p.layers {
		if p.layers[k].Cost > 0 {
			r := &p.out[k]
			r.RetryAfter, r.Delay = 0, 0
		}
	}
	select {
	case s.laterReleases <- struct{}{}:
	default:
		p.relErr = fmt.Errorf("the call's context ended before the release was sent, and %d releases are in the background already: not sent", maxLaterReleases)
		return
	}
	p.later = true
	q := &part{
		slot:   p.slot,
		layers: slices.Clone(p.layers),
		out:    make([]floodgate.Result, len(p.layers)),
		undo:   slices.Clone(p.undo),
	}
	bg := context.WithoutCancel(ctx)
	s.later.add()
	go func() {
		defer func() { <-s.laterReleases; s.later.done() }()
		ctx, cancel := context.WithTimeout(bg, laterReleaseTimeout)
		defer cancel()
		s.release(ctx, now, q, rand.Uint64())
		if q.relErr != nil {
			s.releaseFailed(q.slot, q.relErr)
		}
	}()
}

// splitState reports whether some part failed, and whether some part
// that did not fail denied (a part not sent yet counts as neither).
func splitState(parts []part) (failed, denied bool) {
	for i := range parts {
		p := &parts[i]
		switch {
		case p.err != nil:
			failed = true
		case p.sent && !p.held && !allAllowed(p.out):
			denied = true
		}
	}
	return failed, denied
}

// lastPart returns the index of the part a split decision reserves last:
// the one whose slot the most split decisions of this Store have in
// flight (a global layer's, under load), and among equals the one whose
// tightest layer admits the most per second (a shared layer usually
// admits more than any one identity's); the first of equals otherwise.
func (s *Store) lastPart(parts []part) int {
	best, bestN, bestRate := 0, int32(-1), -1.0
	for i := range parts {
		var n int32
		if s.inflight != nil {
			n = s.inflight[parts[i].slot].Load()
		}
		r := partRate(parts[i].layers)
		if n > bestN || n == bestN && r > bestRate {
			best, bestN, bestRate = i, n, r
		}
	}
	return best
}

// partRate is the lowest rate, in units per second, among layers: each
// layer's limit over its window (a quota's: its current period).
func partRate(layers []floodgate.Layer) float64 {
	r := -1.0
	for i := range layers {
		l := &layers[i]
		span := l.Policy.Window
		if l.Policy.Algorithm == floodgate.Quota {
			span = 30 * 24 * time.Hour // a month; days and weeks rank above it
			switch l.Policy.Calendar.Unit {
			case floodgate.PeriodDay:
				span = 24 * time.Hour
			case floodgate.PeriodWeek:
				span = 7 * 24 * time.Hour
			}
		}
		x := float64(l.Policy.Limit) / max(span.Seconds(), 1e-6)
		if r < 0 || x < r {
			r = x
		}
	}
	return r
}

// each runs fn on every part that want selects, concurrently (one
// goroutine per part but the first, which runs on the caller's).
func each(parts []part, want func(*part) bool, fn func(*part)) {
	var wg sync.WaitGroup
	first := true
	var inline *part
	for i := range parts {
		p := &parts[i]
		if !want(p) {
			continue
		}
		if first {
			first, inline = false, p
			continue
		}
		wg.Go(func() { fn(p) })
	}
	if inline != nil {
		fn(inline)
	}
	wg.Wait()
}

func allAllowed(rs []floodgate.Result) bool {
	for i := range rs {
		if !rs[i].Allowed {
			return false
		}
	}
	return true
}

// reserve runs p's reserve script: its layers are decided and, if they
// all admit, committed at once.
func (s *Store) reserve(ctx context.Context, now int64, p *part) {
	if len(p.out) != len(p.layers) || len(p.undo) != len(p.layers) {
		p.out = make([]floodgate.Result, len(p.layers))
		p.undo = make([][undoWidth]int64, len(p.layers))
	}
	f := s.frames.Get().(*frame)
	defer s.frames.Put(f)
	defer f.reset()
	f.build(now, p.layers, false)
	f.args = append(f.args, argReserve)
	p.sent = true
	val, err := s.scripts.general.RunCommand(ctx, s.client, f.args)
	if err != nil {
		p.err = fmt.Errorf("slot %d: %w", p.slot, err)
		return
	}
	if err := decodeResults(val, p.layers, p.out, p.undo); err != nil {
		// The script ran; whether it wrote cannot be told.
		p.err = fmt.Errorf("%w: slot %d: %w", floodgate.ErrIndeterminate, p.slot, err)
		return
	}
	if allAllowed(p.out) {
		for _, l := range p.layers {
			if l.Cost > 0 {
				p.held = true
				break
			}
		}
	}
}

// probe fills p.out with p's layers' results without writing anything
// (the general script's probe mode): a layer that would admit reports its
// standing, as in any denied decision. A failure is kept in p.err and wraps
// floodgate.ErrStoreUnavailable: whatever happened to the command, a probe
// writes nothing. A probe not sent because its caller had gone (ctx is
// decideSplit's bound context) also wraps context.Canceled, which
// fallback does not count against the primary: with the command's error
// kept as text only, a gone caller's denied split decision opened the
// breaker of a healthy Redis (review16).
func (s *Store) probe(ctx context.Context, now int64, p *part) {
	if len(p.out) != len(p.layers) {
		p.out = make([]floodgate.Result, len(p.layers))
	}
	f := s.frames.Get().(*frame)
	defer s.frames.Put(f)
	defer f.reset()
	f.build(now, p.layers, false)
	f.args = append(f.args, argProbe)
	val, err := s.scripts.general.RunCommand(ctx, s.client, f.args)
	if err == nil {
		err = decodeResults(val, p.layers, p.out, nil)
	}
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled):
		p.err = fmt.Errorf("%w: slot %d: asking the results of a part not reserved (its caller had gone): %w", floodgate.ErrStoreUnavailable, p.slot, context.Canceled)
	default:
		p.err = fmt.Errorf("%w: slot %d: asking the results of a part not reserved: %v", floodgate.ErrStoreUnavailable, p.slot, err)
	}
}

// release gives back p's reservation under the marker named by id: every
// consuming layer gets back what the reservation still holds, and reports
// its standing afterwards. If the release fails (p.relErr), those layers
// report what the reservation left, which is what they hold, as standings.
// It returns whether this call gave back (false when the marker was
// there already, or on failure) and what each consuming layer got back.
func (s *Store) release(ctx context.Context, now int64, p *part, id uint64) (bool, []released) {
	var layers []floodgate.Layer
	var undo [][undoWidth]int64
	var pos []int
	for k, l := range p.layers {
		if l.Cost > 0 {
			layers = append(layers, l)
			undo = append(undo, p.undo[k])
			pos = append(pos, k)
		}
	}
	for _, k := range pos {
		r := &p.out[k]
		r.RetryAfter, r.Delay = 0, 0
	}
	// The marker goes with the part's first key, which decideSplit checked
	// before anything was sent; the error is kept for safety.
	marker, err := markerKey(p.layers[0].Key, id)
	if err != nil {
		p.relErr = err
		return false, nil
	}
	f := s.frames.Get().(*frame)
	defer s.frames.Put(f)
	defer f.reset()
	f.buildRelease(now, layers, undo, marker, true, releaseMarkerTTL.Milliseconds())
	val, err := s.scripts.general.RunCommand(ctx, s.relClient, f.args)
	if _, moving := errors.AsType[*slotMoving](err); moving {
		// The part's slot is being moved between primaries, and the
		// marker, a new key, is on neither node (see slotMoving): the
		// release ran nowhere. Its bare form names only keys that exist
		// (the layers' keys, which the reservation wrote, and their
		// journals), so the node that holds them runs it: the source, or
		// the target after the ASK redirection go-redis follows. It has no
		// marker: this release is sent once, under a marker no other
		// release uses, so the marker guards only against a resend, and
		// nothing resends it (a script command is never resent, and
		// TRYAGAIN means that nothing ran). A bucket layer whose journal
		// does not exist yet makes even that refused: then it goes without
		// the journals, and its bucket layers are given back by the rule
		// before the journals, never more than the reservation still
		// holds, possibly less. A part without bucket layers goes without
		// journals at once.
		journals := false
		for i := range layers {
			journals = journals || keepsJournal(layers[i].Policy.Algorithm)
		}
		// The last form goes through the Store's client: a TRYAGAIN then
		// (the layers' keys split between the nodes by a MIGRATE under
		// way) is sent again until ctx ends.
		c := s.client
		if journals {
			c = s.relClient
		}
		f.reset()
		f.buildRelease(now, layers, undo, "", journals, releaseMarkerTTL.Milliseconds())
		val, err = s.scripts.general.RunCommand(ctx, c, f.args)
		if _, moving := errors.AsType[*slotMoving](err); moving && journals {
			f.reset()
			f.buildRelease(now, layers, undo, "", false, releaseMarkerTTL.Milliseconds())
			val, err = s.scripts.general.RunCommand(ctx, s.client, f.args)
		}
	}
	if err != nil {
		// err's class is not trusted here: a release may fail after it
		// wrote (see script), so a failed release means only that the
		// reservation may still be held, which splitError reports as
		// indeterminate.
		p.relErr = err
		return false, nil
	}
	rel := make([]released, len(layers))
	applied, err := decodeRelease(val, rel)
	if err != nil {
		p.relErr = err
		return false, nil
	}
	for i, k := range pos {
		if rel[i].known {
			p.out[k] = algo.ResultFromMicros(true, layers[i].Policy.Capacity(), rel[i].rem, rel[i].at, 0, 0, floodgate.ReasonNone)
		}
	}
	return applied, rel
}

// releaseClient is the client a release is first sent through: the Store's,
// with a TRYAGAIN reply turned into a *slotMoving error, so that the script
// machinery (luascript), which sends a call refused with TRYAGAIN again
// until the caller's context ends, hands it back at once.
type releaseClient struct{ luascript.Client }

// Process sends cmd, and replaces a TRYAGAIN reply with a *slotMoving.
func (c releaseClient) Process(ctx context.Context, cmd redis.Cmder) error {
	err := c.Client.Process(ctx, cmd)
	// Err, rather than Process's result, waits for the reply even on a
	// deferred client such as an asynchronous AutoPipeliner.
	if e := cmd.Err(); e != nil && redis.HasErrorPrefix(e, "TRYAGAIN") {
		m := &slotMoving{msg: e.Error()}
		cmd.SetErr(m)
		return m
	}
	return err
}

// slotMoving is a release refused with TRYAGAIN: its slot is being moved
// between primaries (MIGRATING on one, IMPORTING on the other), and its
// keys are not all on one of them. That is the case of every release
// during the whole move: its marker and journals do not exist anywhere,
// while the layers' keys do, on the source until MIGRATE moves them, and
// Redis runs a call naming several keys of a migrating slot only on a node
// that holds them all (Redis 7.0: the source answers TRYAGAIN while it
// holds some of them and ASK once it holds none; the target, asked, answers
// TRYAGAIN while one is missing). Nothing ran. It is deliberately not a
// redis.Error, so that luascript does not send the call again.
type slotMoving struct{ msg string }

func (e *slotMoving) Error() string { return e.msg }

// splitError is the error of a split decision some part of which failed.
// It wraps floodgate.ErrIndeterminate when a reservation may be kept (a
// reserve whose outcome is unknown, a committed part whose release was not
// confirmed, or one whose release went to the background, see
// releaseLater, and whose outcome is not known yet), and
// floodgate.ErrStoreUnavailable otherwise: every part either wrote nothing
// or was released; and a floodgate.FailedKeyError naming the failed part's
// key, so that a breaker per Cluster primary blames that part's primary
// (not the primary of a part whose release is not confirmed). When a part
// failed without writing and another kept its reservation, the error is
// indeterminate only: the failed part's FailedKeyError comes with its
// error's text, not its kinds.
func splitError(parts []part) error {
	var unavailable, indeterminate, kept error
	for i := range parts {
		p := &parts[i]
		switch {
		case p.err != nil && errors.Is(p.err, floodgate.ErrIndeterminate):
			if indeterminate == nil {
				indeterminate = &floodgate.FailedKeyError{Key: p.layers[0].Key, Err: p.err}
			}
		case p.err != nil:
			// A part Redis refused is named before one dropped for a
			// caller that went: the first part's context.Canceled hid
			// another's refusal (out of memory) from the breaker
			// (review17).
			if unavailable == nil || errors.Is(unavailable, context.Canceled) && !errors.Is(p.err, context.Canceled) {
				unavailable = &floodgate.FailedKeyError{Key: p.layers[0].Key, Err: p.err}
			}
		case p.relErr != nil:
			if kept == nil {
				kept = fmt.Errorf("%w: slot %d: its reservation was not released: %v", floodgate.ErrIndeterminate, p.slot, p.relErr)
			}
		case p.later:
			if kept == nil {
				kept = fmt.Errorf("%w: slot %d: its reservation is being released in the background (the call's context ended before the release was sent)", floodgate.ErrIndeterminate, p.slot)
			}
		}
	}
	switch {
	case indeterminate != nil:
		return fmt.Errorf("redisstore: decision split over %d slots: %w", len(parts), indeterminate)
	case kept != nil && unavailable != nil:
		// The failed part's key, for the breaker to blame its primary,
		// but not its error's kinds: that part wrote nothing, yet the
		// decision may have kept a charge, so it must not read as
		// ErrStoreUnavailable (nothing written) or ErrForeignValue.
		fk := unavailable.(*floodgate.FailedKeyError)
		plain := &floodgate.FailedKeyError{Key: fk.Key, Err: errors.New(fk.Err.Error())}
		return fmt.Errorf("redisstore: decision split over %d slots: %w; %w", len(parts), kept, plain)
	case kept != nil:
		return fmt.Errorf("redisstore: decision split over %d slots: %w", len(parts), kept)
	}
	return fmt.Errorf("redisstore: decision split over %d slots, nothing kept: %w", len(parts), unavailable)
}

// journalKey returns the key of the release journal of a bucket key (see
// bucket_refund in lua/release.lua): key+":rq", in key's slot when key has a
// hash tag, as floodgate.Key's keys do; otherwise "{"+key+"}:rq". The layers
// of a part share their first key's slot, which decideSplit checked with
// markerKey, so a key without a hash tag here has no '}' either.
func journalKey(key string) string {
	if algo.HashTag(key) == key {
		return "{" + key + "}:rq"
	}
	return key + ":rq"
}

// keepsJournal reports whether a layer of algorithm a keeps a release
// journal (the buckets do, see journalKey).
func keepsJournal(a floodgate.Algorithm) bool {
	return a == floodgate.TokenBucket || a == floodgate.GCRA
}

// markerKey returns the key of a release marker for a reservation on key:
// in key's slot, and under its prefix when key has a hash tag (key +
// ":rel:" + id). A key without a hash tag is wrapped in one; a key that
// cannot be is refused with an error wrapping floodgate.ErrInvalidKey.
func markerKey(key string, id uint64) (string, error) {
	suffix := ":rel:" + strconv.FormatUint(id, 16)
	m := key + suffix
	if algo.HashTag(key) == key {
		m = "{" + key + "}" + suffix
	}
	if Slot(m) != Slot(key) {
		return "", fmt.Errorf("%w: key %q has no hash tag and contains '}', so a release marker cannot be placed in its slot; give it a hash tag (floodgate.Key does)", floodgate.ErrInvalidKey, key)
	}
	return m, nil
}
