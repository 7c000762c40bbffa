package loginguard

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The shared vectors: named sequences of operations at fixed instants with
// the exact verdicts the guard must give. They run against the pure step
// function, the Memory backend and Redis (the Lua scripts), which must all
// agree. Expected values are derived by hand from the ladder rules, in the
// comments.

const (
	opUnlock   op = 100 // test-only: Guard.Unlock(account)
	opUnlockIP op = 101 // test-only: Guard.UnlockIP(ip)
)

type vstep struct {
	at      time.Duration
	op      op
	account string
	ip      string
	action  Action
	retry   time.Duration
	by      Dimension
	crossed Dimensions      // opFailure only
	fails   [numDims]int64  // opFailure only: account, ip, pair failures after it
	pending *[numDims]int64 // opPeek only, when set: pending attempts per dimension
}

type vector struct {
	name  string
	opts  Options
	steps []vstep
}

// base is the ladder set most vectors use: small, distinct thresholds.
var base = Options{
	Account:        Ladder{Captcha: 3, Delay: 5, Lock: 7, Window: 10 * time.Minute, Lockout: 30 * time.Minute},
	IP:             Ladder{Captcha: 4, Delay: 6, Lock: 9, Window: time.Hour, Lockout: 30 * time.Minute},
	Pair:           Ladder{Captcha: 2, Delay: 3, Lock: 4, Window: 10 * time.Minute, Lockout: 20 * time.Minute},
	BaseDelay:      time.Second,
	MaxDelay:       8 * time.Second,
	AttemptTimeout: 30 * time.Second,
}

// high is a ladder that never triggers in these vectors.
var high = Ladder{Captcha: 100, Delay: 200, Lock: 300, Window: time.Hour, Lockout: time.Hour}

func with(o Options, f func(*Options)) Options { f(&o); return o }

const (
	ipA = "203.0.113.10"
	ipB = "198.51.100.20"
)

func vectors() []vector {
	s := time.Second
	return []vector{
		{name: "one address climbs the pair ladder", opts: base, steps: []vstep{
			{at: 0, op: opCheck, account: "alice", ip: ipA, action: Allow},
			{at: 0, op: opFailure, account: "alice", ip: ipA, action: Allow, fails: [3]int64{1, 1, 1}},
			{at: 1 * s, op: opCheck, account: "alice", ip: ipA, action: Allow},
			// Pair at 2 failures: CAPTCHA.
			{at: 1 * s, op: opFailure, account: "alice", ip: ipA, action: CaptchaRequired, by: DimPair, fails: [3]int64{2, 2, 2}},
			{at: 2 * s, op: opCheck, account: "alice", ip: ipA, action: CaptchaRequired, by: DimPair},
			// Pair at 3: delay rung, first delay 1 s after this failure.
			{at: 2 * s, op: opFailure, account: "alice", ip: ipA, action: Delay, retry: 1 * s, by: DimPair, fails: [3]int64{3, 3, 3}},
			{at: 2500 * time.Millisecond, op: opCheck, account: "alice", ip: ipA, action: Delay, retry: 500 * time.Millisecond, by: DimPair},
			// Delay over: account (3) and pair both ask a CAPTCHA; the tie
			// goes to the account.
			{at: 3 * s, op: opCheck, account: "alice", ip: ipA, action: CaptchaRequired, by: DimAccount},
			// Pair reaches its lock threshold 4: locked 20 min, crossed once.
			{at: 3 * s, op: opFailure, account: "alice", ip: ipA, action: Locked, retry: 20 * time.Minute, by: DimPair, crossed: 1 << (DimPair - 1), fails: [3]int64{4, 4, 4}},
			{at: 4 * s, op: opCheck, account: "alice", ip: ipA, action: Locked, retry: 20*time.Minute - s, by: DimPair},
			// From another address: a clean pair, the account (4 >= 3)
			// asks a CAPTCHA.
			{at: 4 * s, op: opPeek, account: "alice", ip: ipB, action: CaptchaRequired, by: DimAccount},
			// The address's other accounts: the IP (4 >= 4) asks a CAPTCHA.
			{at: 4 * s, op: opPeek, account: "bob", ip: ipA, action: CaptchaRequired, by: DimIP},
			// 20 min later: pair lock over, pair and account windows (10 min)
			// forgotten, the IP (1 h) still at 4.
			{at: 20*time.Minute + 3*s, op: opCheck, account: "alice", ip: ipA, action: CaptchaRequired, by: DimIP},
			{at: 20*time.Minute + 3*s, op: opSuccess, account: "alice", ip: ipA},
			// Success does not excuse the address.
			{at: 20*time.Minute + 4*s, op: opPeek, account: "alice", ip: ipA, action: CaptchaRequired, by: DimIP, pending: &[3]int64{0, 0, 0}},
		}},
		{name: "delay doubles and caps", opts: with(base, func(o *Options) {
			o.Account = Ladder{Delay: 1, Window: 10 * time.Minute, Lockout: time.Minute}
			o.IP, o.Pair = high, high
		}), steps: []vstep{
			{at: 0, op: opFailure, account: "carol", ip: ipA, action: Delay, retry: 1 * s, by: DimAccount, fails: [3]int64{1, 1, 1}},
			{at: 1 * s, op: opFailure, account: "carol", ip: ipA, action: Delay, retry: 2 * s, by: DimAccount, fails: [3]int64{2, 2, 2}},
			{at: 3 * s, op: opFailure, account: "carol", ip: ipA, action: Delay, retry: 4 * s, by: DimAccount, fails: [3]int64{3, 3, 3}},
			{at: 7 * s, op: opFailure, account: "carol", ip: ipA, action: Delay, retry: 8 * s, by: DimAccount, fails: [3]int64{4, 4, 4}},
			// 16 s capped at MaxDelay 8 s.
			{at: 15 * s, op: opFailure, account: "carol", ip: ipA, action: Delay, retry: 8 * s, by: DimAccount, fails: [3]int64{5, 5, 5}},
			{at: 20 * s, op: opCheck, account: "carol", ip: ipA, action: Delay, retry: 3 * s, by: DimAccount},
			// Delay served: no CAPTCHA rung, allowed, and counted as in
			// progress, so a parallel second attempt must wait again.
			{at: 23 * s, op: opCheck, account: "carol", ip: ipA, action: Allow},
			{at: 23 * s, op: opCheck, account: "carol", ip: ipA, action: Delay, retry: 8 * s, by: DimAccount},
			{at: 23 * s, op: opPeek, account: "carol", ip: ipA, action: Delay, retry: 8 * s, by: DimAccount, pending: &[3]int64{1, 1, 1}},
			// The abandoned attempt times out after 30 s.
			{at: 53 * s, op: opPeek, account: "carol", ip: ipA, action: Allow, pending: &[3]int64{0, 0, 0}},
		}},
		{name: "victim keeps a way in", opts: with(base, func(o *Options) {
			o.Account = Ladder{Captcha: 1, Delay: 2, Lock: 3, Window: 10 * time.Minute, Lockout: 30 * time.Minute}
			o.IP, o.Pair = high, high
		}), steps: []vstep{
			{at: 0, op: opFailure, account: "victim", ip: ipA, action: CaptchaRequired, by: DimAccount, fails: [3]int64{1, 1, 1}},
			// Account at 2: delayed — but for whom? The attacker's pair is
			// not clean, so the delay applies to it.
			{at: 0, op: opFailure, account: "victim", ip: ipA, action: Delay, retry: s, by: DimAccount, fails: [3]int64{2, 2, 2}},
			{at: 0, op: opFailure, account: "victim", ip: ipA, action: Locked, retry: 30 * time.Minute, by: DimAccount, crossed: 1 << (DimAccount - 1), fails: [3]int64{3, 3, 3}},
			// The owner, from a clean address: a CAPTCHA, not the lock.
			{at: 1 * s, op: opCheck, account: "victim", ip: ipB, action: CaptchaRequired, by: DimAccount},
			// A second parallel attempt from there: that pair has an attempt
			// in progress, so it is no longer clean.
			{at: 1 * s, op: opCheck, account: "victim", ip: ipB, action: Locked, retry: 30*time.Minute - s, by: DimAccount},
			// The first attempt came without a CAPTCHA: abandoned, nothing
			// counted, the pair is clean again.
			{at: 2 * s, op: opAbandon, account: "victim", ip: ipB},
			{at: 2 * s, op: opPeek, account: "victim", ip: ipB, action: CaptchaRequired, by: DimAccount, pending: &[3]int64{0, 0, 0}},
			{at: 2 * s, op: opCheck, account: "victim", ip: ipB, action: CaptchaRequired, by: DimAccount},
			{at: 2 * s, op: opSuccess, account: "victim", ip: ipB},
			// Success cleared the account's failures, not its lock; the pair
			// is clean again.
			{at: 3 * s, op: opPeek, account: "victim", ip: ipB, action: CaptchaRequired, by: DimAccount, pending: &[3]int64{0, 0, 0}},
			{at: 3 * s, op: opCheck, account: "victim", ip: ipA, action: Locked, retry: 30*time.Minute - 3*s, by: DimAccount},
			// An administrator unlocks: the account state is gone.
			{at: 4 * s, op: opUnlock, account: "victim"},
			{at: 4 * s, op: opCheck, account: "victim", ip: ipA, action: Allow},
		}},
		{name: "strict account lock", opts: with(base, func(o *Options) {
			o.Account = Ladder{Captcha: 1, Delay: 2, Lock: 3, Window: 10 * time.Minute, Lockout: 30 * time.Minute}
			o.IP, o.Pair = high, high
			o.StrictAccountLock = true
		}), steps: []vstep{
			{at: 0, op: opFailure, account: "victim", ip: ipA, action: CaptchaRequired, by: DimAccount, fails: [3]int64{1, 1, 1}},
			{at: 0, op: opFailure, account: "victim", ip: ipA, action: Delay, retry: s, by: DimAccount, fails: [3]int64{2, 2, 2}},
			{at: 0, op: opFailure, account: "victim", ip: ipA, action: Locked, retry: 30 * time.Minute, by: DimAccount, crossed: 1 << (DimAccount - 1), fails: [3]int64{3, 3, 3}},
			{at: 1 * s, op: opCheck, account: "victim", ip: ipB, action: Locked, retry: 30*time.Minute - s, by: DimAccount},
			{at: 30 * time.Minute, op: opCheck, account: "victim", ip: ipB, action: Allow},
		}},
		{name: "one address sprays accounts", opts: with(base, func(o *Options) {
			o.IP = Ladder{Captcha: 2, Lock: 3, Window: time.Hour, Lockout: time.Hour}
			o.Account, o.Pair = high, high
			o.IPv4Prefix = 24
		}), steps: []vstep{
			{at: 0, op: opFailure, account: "u1", ip: "203.0.113.5", action: Allow, fails: [3]int64{1, 1, 1}},
			{at: 0, op: opFailure, account: "u2", ip: "203.0.113.5", action: CaptchaRequired, by: DimIP, fails: [3]int64{1, 2, 1}},
			{at: 0, op: opFailure, account: "u3", ip: "203.0.113.5", action: Locked, retry: time.Hour, by: DimIP, crossed: 1 << (DimIP - 1), fails: [3]int64{1, 3, 1}},
			{at: s, op: opCheck, account: "u4", ip: "203.0.113.5", action: Locked, retry: time.Hour - s, by: DimIP},
			// Same /24: same network.
			{at: s, op: opCheck, account: "u4", ip: "203.0.113.77", action: Locked, retry: time.Hour - s, by: DimIP},
			{at: s, op: opCheck, account: "u4", ip: ipB, action: Allow},
			{at: 2 * s, op: opUnlockIP, ip: "203.0.113.9"},
			{at: 2 * s, op: opCheck, account: "u5", ip: "203.0.113.5", action: Allow},
		}},
		{name: "lock ends and a further failure locks again", opts: with(base, func(o *Options) {
			o.Pair = Ladder{Lock: 2, Window: 10 * time.Minute, Lockout: time.Minute}
			o.Account, o.IP = high, high
		}), steps: []vstep{
			{at: 0, op: opFailure, account: "dave", ip: ipA, action: Allow, fails: [3]int64{1, 1, 1}},
			{at: 0, op: opFailure, account: "dave", ip: ipA, action: Locked, retry: time.Minute, by: DimPair, crossed: 1 << (DimPair - 1), fails: [3]int64{2, 2, 2}},
			// A failure recorded while locked is counted but does not extend
			// or re-cross the lock.
			{at: 30 * s, op: opFailure, account: "dave", ip: ipA, action: Locked, retry: 30 * s, by: DimPair, fails: [3]int64{3, 3, 3}},
			{at: 90 * s, op: opCheck, account: "dave", ip: ipA, action: Allow},
			{at: 90 * s, op: opFailure, account: "dave", ip: ipA, action: Locked, retry: time.Minute, by: DimPair, crossed: 1 << (DimPair - 1), fails: [3]int64{4, 4, 4}},
		}},
		{name: "windows and a clock running behind", opts: with(base, func(o *Options) {
			o.Pair = Ladder{Captcha: 1, Delay: 2, Window: 10 * time.Minute, Lockout: time.Minute}
			o.Account, o.IP = high, high
		}), steps: []vstep{
			{at: 10 * time.Minute, op: opFailure, account: "erin", ip: ipA, action: CaptchaRequired, by: DimPair, fails: [3]int64{1, 1, 1}},
			// An instance 5 minutes behind sees the failure, not a window
			// already past.
			{at: 5 * time.Minute, op: opPeek, account: "erin", ip: ipA, action: CaptchaRequired, by: DimPair},
			{at: 10 * time.Minute, op: opFailure, account: "erin", ip: ipA, action: Delay, retry: s, by: DimPair, fails: [3]int64{2, 2, 2}},
			// Behind by a minute: the delay still ends 1 s after the failure,
			// 61 s from this instance's point of view.
			{at: 9 * time.Minute, op: opPeek, account: "erin", ip: ipA, action: Delay, retry: 61 * s, by: DimPair},
			// A failure from the slow instance is counted at the state's own
			// time, never moving it back.
			{at: 9 * time.Minute, op: opFailure, account: "erin", ip: ipA, action: Delay, retry: 62 * s, by: DimPair, fails: [3]int64{3, 3, 3}},
			// Failures are forgotten 10 minutes after the last one.
			{at: 20*time.Minute - time.Microsecond, op: opPeek, account: "erin", ip: ipA, action: CaptchaRequired, by: DimPair},
			{at: 20 * time.Minute, op: opPeek, account: "erin", ip: ipA, action: Allow},
		}},
		{name: "attempts in progress count", opts: base, steps: []vstep{
			{at: 0, op: opCheck, account: "frank", ip: ipA, action: Allow},
			{at: 0, op: opCheck, account: "frank", ip: ipA, action: Allow},
			// Two in progress: the pair's CAPTCHA rung (2) applies to the third.
			{at: 0, op: opCheck, account: "frank", ip: ipA, action: CaptchaRequired, by: DimPair},
			// Success settles one attempt in every dimension; two are still
			// in progress, so the pair still asks a CAPTCHA.
			{at: 0, op: opSuccess, account: "frank", ip: ipA},
			{at: 0, op: opPeek, account: "frank", ip: ipA, action: CaptchaRequired, by: DimPair, pending: &[3]int64{2, 2, 2}},
			{at: 30 * s, op: opPeek, account: "frank", ip: ipA, action: Allow, pending: &[3]int64{0, 0, 0}},
		}},
		{name: "attempts in progress hold back the lock", opts: with(base, func(o *Options) {
			o.Pair = Ladder{Lock: 3, Window: 10 * time.Minute, Lockout: time.Minute}
			o.Account, o.IP = high, high
		}), steps: []vstep{
			{at: 0, op: opCheck, account: "ivan", ip: ipA, action: Allow},
			{at: 0, op: opCheck, account: "ivan", ip: ipA, action: Allow},
			{at: 0, op: opCheck, account: "ivan", ip: ipA, action: Allow},
			// Three in progress could reach the pair's lock (3): a fourth
			// waits for them, at the latest until they expire, 30 s after
			// the pair's last attempt. (Before, a Lock-only ladder let
			// every parallel guess through.)
			{at: 1 * s, op: opCheck, account: "ivan", ip: ipA, action: Delay, retry: 29 * s, by: DimPair},
			{at: 1 * s, op: opPeek, account: "ivan", ip: ipA, action: Delay, retry: 29 * s, by: DimPair, pending: &[3]int64{3, 3, 3}},
			// A failure counts: still 3, and its time moves the expiry.
			{at: 2 * s, op: opFailure, account: "ivan", ip: ipA, action: Delay, retry: 30 * s, by: DimPair, fails: [3]int64{1, 1, 1}},
			// A success clears the pair's failures: one in progress, room
			// for two.
			{at: 2 * s, op: opSuccess, account: "ivan", ip: ipA},
			{at: 2 * s, op: opPeek, account: "ivan", ip: ipA, action: Allow, pending: &[3]int64{1, 1, 1}},
			{at: 3 * s, op: opCheck, account: "ivan", ip: ipA, action: Allow},
			{at: 3 * s, op: opCheck, account: "ivan", ip: ipA, action: Allow},
			{at: 3 * s, op: opCheck, account: "ivan", ip: ipA, action: Delay, retry: 30 * s, by: DimPair},
			{at: 4 * s, op: opFailure, account: "ivan", ip: ipA, action: Delay, retry: 30 * s, by: DimPair, fails: [3]int64{1, 2, 1}},
			{at: 4 * s, op: opFailure, account: "ivan", ip: ipA, action: Delay, retry: 30 * s, by: DimPair, fails: [3]int64{2, 3, 2}},
			// The third failure reaches the lock: 3 password checks since
			// the success, never more.
			{at: 4 * s, op: opFailure, account: "ivan", ip: ipA, action: Locked, retry: time.Minute, by: DimPair, crossed: 1 << (DimPair - 1), fails: [3]int64{3, 4, 3}},
			// The lock over, its failures still counted: one attempt at a
			// time, as its failure would lock again.
			{at: 64 * s, op: opCheck, account: "ivan", ip: ipA, action: Allow},
			{at: 64 * s, op: opCheck, account: "ivan", ip: ipA, action: Delay, retry: 30 * s, by: DimPair},
			// Never settled, it expires after the attempt timeout.
			{at: 94 * s, op: opPeek, account: "ivan", ip: ipA, action: Allow, pending: &[3]int64{0, 0, 0}},
		}},
		{name: "attempts in progress against an account lock", opts: with(base, func(o *Options) {
			o.Account = Ladder{Lock: 2, Window: 10 * time.Minute, Lockout: time.Minute}
			o.IP, o.Pair = high, high
		}), steps: []vstep{
			{at: 0, op: opCheck, account: "judy", ip: ipA, action: Allow},
			{at: 0, op: opCheck, account: "judy", ip: ipA, action: Allow},
			{at: 0, op: opCheck, account: "judy", ip: ipA, action: Delay, retry: 30 * s, by: DimAccount},
			// Unless strict, the account's wait is only a CAPTCHA for a
			// pair with a clean record, as its lock would be.
			{at: 0, op: opCheck, account: "judy", ip: ipB, action: CaptchaRequired, by: DimAccount},
			{at: 0, op: opCheck, account: "judy", ip: ipB, action: Delay, retry: 30 * s, by: DimAccount},
			{at: 1 * s, op: opSuccess, account: "judy", ip: ipB},
			{at: 1 * s, op: opPeek, account: "judy", ip: ipA, action: Delay, retry: 29 * s, by: DimAccount, pending: &[3]int64{2, 2, 2}},
			{at: 1 * s, op: opAbandon, account: "judy", ip: ipA},
			{at: 1 * s, op: opCheck, account: "judy", ip: ipA, action: Allow},
		}},
		{name: "attempts in progress against a strict account lock", opts: with(base, func(o *Options) {
			o.Account = Ladder{Delay: 1, Lock: 2, Window: 10 * time.Minute, Lockout: time.Minute}
			o.IP, o.Pair = high, high
			o.StrictAccountLock = true
		}), steps: []vstep{
			{at: 0, op: opCheck, account: "judy", ip: ipA, action: Allow},
			// The first delay (1 s) is served, and one in progress is
			// below the lock.
			{at: 1 * s, op: opCheck, account: "judy", ip: ipB, action: Allow},
			// Two in progress: the delay rung (2 s, until 3 s) and the
			// wait for them (until 31 s) both apply; the later wins, and
			// strict, a clean pair does not pass it.
			{at: 1 * s, op: opCheck, account: "judy", ip: ipB, action: Delay, retry: 30 * s, by: DimAccount},
			{at: 1 * s, op: opPeek, account: "judy", ip: "192.0.2.1", action: Delay, retry: 30 * s, by: DimAccount},
			{at: 2 * s, op: opFailure, account: "judy", ip: ipA, action: Delay, retry: 30 * s, by: DimAccount, fails: [3]int64{1, 1, 1}},
			{at: 3 * s, op: opFailure, account: "judy", ip: ipB, action: Locked, retry: time.Minute, by: DimAccount, crossed: 1 << (DimAccount - 1), fails: [3]int64{2, 1, 1}},
		}},
		{name: "a delay for attempts in progress ends when they expire", opts: with(base, func(o *Options) {
			o.Account = Ladder{Delay: 2, Window: 10 * time.Minute, Lockout: time.Minute}
			o.IP, o.Pair = high, high
			o.AttemptTimeout = 3 * s
		}), steps: []vstep{
			// An attacker leaves attempts in progress from clean pairs
			// (each only a CAPTCHA, not strict).
			{at: 0, op: opCheck, account: "kim", ip: ipA, action: Allow},
			{at: 0, op: opCheck, account: "kim", ip: ipB, action: Allow},
			{at: 0, op: opCheck, account: "kim", ip: "192.0.2.1", action: CaptchaRequired, by: DimAccount},
			{at: 0, op: opCheck, account: "kim", ip: "192.0.2.2", action: CaptchaRequired, by: DimAccount},
			{at: 0, op: opCheck, account: "kim", ip: "192.0.2.3", action: CaptchaRequired, by: DimAccount},
			// The owner mistypes once: 1 failure and 5 in progress would
			// wait 8 s (1 s doubled 4 times, capped), but the failure
			// alone is below the Delay rung, so the wait ends when the
			// attempts in progress expire, 3 s after this failure (it
			// said 8 s).
			{at: 1 * s, op: opCheck, account: "kim", ip: "192.0.2.50", action: CaptchaRequired, by: DimAccount},
			{at: 1 * s, op: opFailure, account: "kim", ip: "192.0.2.50", action: Delay, retry: 3 * s, by: DimAccount, fails: [3]int64{1, 1, 1}},
			{at: 4*s - time.Microsecond, op: opPeek, account: "kim", ip: "192.0.2.50", action: Delay, retry: time.Microsecond, by: DimAccount},
			{at: 4 * s, op: opCheck, account: "kim", ip: "192.0.2.50", action: Allow},
		}},
		{name: "a delay for failures and attempts in progress", opts: with(base, func(o *Options) {
			o.Account = Ladder{Delay: 1, Window: 10 * time.Minute, Lockout: time.Minute}
			o.IP, o.Pair = high, high
			o.AttemptTimeout = 3 * s
		}), steps: []vstep{
			{at: 0, op: opFailure, account: "lee", ip: ipA, action: Delay, retry: 1 * s, by: DimAccount, fails: [3]int64{1, 1, 1}},
			{at: 0, op: opFailure, account: "lee", ip: ipA, action: Delay, retry: 2 * s, by: DimAccount, fails: [3]int64{2, 2, 2}},
			{at: 0, op: opFailure, account: "lee", ip: ipA, action: Delay, retry: 4 * s, by: DimAccount, fails: [3]int64{3, 3, 3}},
			// Two in progress from clean pairs.
			{at: 1 * s, op: opCheck, account: "lee", ip: ipB, action: CaptchaRequired, by: DimAccount},
			{at: 1 * s, op: opCheck, account: "lee", ip: "192.0.2.1", action: CaptchaRequired, by: DimAccount},
			// 3 failures and 2 in progress: 8 s (capped) after the last
			// attempt, but the two expire at 4 s and the failures alone
			// then wait 4 s after it: until 5 s (it said 9 s).
			{at: 1 * s, op: opPeek, account: "lee", ip: ipA, action: Delay, retry: 4 * s, by: DimAccount, pending: &[3]int64{2, 0, 0}},
			// Expired, the failures' own delay still holds.
			{at: 4 * s, op: opPeek, account: "lee", ip: ipA, action: Delay, retry: 1 * s, by: DimAccount, pending: &[3]int64{0, 0, 0}},
			{at: 5 * s, op: opCheck, account: "lee", ip: ipA, action: Allow},
		}},
		{name: "IPv6 counted per /64", opts: with(base, func(o *Options) {
			o.IP = Ladder{Captcha: 2, Window: time.Hour, Lockout: time.Hour}
			o.Account, o.Pair = high, high
		}), steps: []vstep{
			{at: 0, op: opFailure, account: "g1", ip: "2001:db8:1:2::1", action: Allow, fails: [3]int64{1, 1, 1}},
			{at: 0, op: opFailure, account: "g2", ip: "2001:db8:1:2:ffff::9", action: CaptchaRequired, by: DimIP, fails: [3]int64{1, 2, 1}},
			{at: 0, op: opPeek, account: "g3", ip: "2001:db8:1:3::1", action: Allow},
			{at: 0, op: opPeek, account: "g3", ip: "::ffff:203.0.113.10", action: Allow},
		}},
		{name: "account names are normalised", opts: with(base, func(o *Options) {
			o.Account = Ladder{Captcha: 2, Window: time.Hour, Lockout: time.Hour}
			o.IP, o.Pair = high, high
		}), steps: []vstep{
			{at: 0, op: opFailure, account: "Heidi", ip: ipA, action: Allow, fails: [3]int64{1, 1, 1}},
			{at: 0, op: opFailure, account: "  HEIDI\t", ip: ipB, action: CaptchaRequired, by: DimAccount, fails: [3]int64{2, 1, 1}},
			{at: 0, op: opPeek, account: "ｈｅｉｄｉ", ip: ipB, action: CaptchaRequired, by: DimAccount},
		}},
	}
}

func runVector(t *testing.T, g *Guard, c *clock, v vector) {
	t.Helper()
	ctx := context.Background()
	for i, s := range v.steps {
		c.set(t0.Add(s.at))
		where := fmt.Sprintf("step %d (%v op %d %s@%s)", i, s.at, s.op, s.account, s.ip)
		var ip = addr(ipA)
		if s.ip != "" {
			ip = addr(s.ip)
		}
		var got Verdict
		switch s.op {
		case opCheck:
			v, err := g.Check(ctx, s.account, ip)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			got = v
		case opPeek:
			st, err := g.Status(ctx, s.account, ip)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			got = st.Verdict
			if s.pending != nil {
				if p := [3]int64{st.Account.Pending, st.IP.Pending, st.Pair.Pending}; p != *s.pending {
					t.Fatalf("%s: pending %v, want %v", where, p, *s.pending)
				}
			}
		case opFailure:
			o, err := g.Failure(ctx, s.account, ip)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if o.Locked != s.crossed || o.Failures != s.fails {
				t.Fatalf("%s: locked %v failures %v, want %v %v", where, o.Locked, o.Failures, s.crossed, s.fails)
			}
			got = o.Next
		case opSuccess:
			if err := g.Success(ctx, s.account, ip); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			continue
		case opAbandon:
			if err := g.Abandon(ctx, s.account, ip); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			continue
		case opUnlock:
			if err := g.Unlock(ctx, s.account); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			continue
		case opUnlockIP:
			if err := g.UnlockIP(ctx, ip); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			continue
		}
		want := Verdict{Action: s.action, RetryAfter: s.retry, By: s.by}
		if s.retry != 0 {
			want.Until = t0.Add(s.at + s.retry)
		}
		if !got.Until.Equal(want.Until) || got.Action != want.Action || got.RetryAfter != want.RetryAfter || got.By != want.By {
			t.Fatalf("%s: got %v (until %v), want %v (until %v)", where, got, got.Until, want, want.Until)
		}
	}
}

func TestVectors(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			for i, v := range vectors() {
				t.Run(v.name, func(t *testing.T) {
					c := &clock{t: t0}
					opts := v.opts
					opts.Clock = c.now
					g := newGuard(t, mk(t, fmt.Sprintf("lgv%d", i)), opts)
					runVector(t, g, c, v)
				})
			}
		})
	}
}
