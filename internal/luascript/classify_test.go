package luascript_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/connsetup"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/redis/go-redis/v9"
)

// TestClassify maps each kind of go-redis failure to whether the script
// may have run, and keeps the original error in the chain.
func TestClassify(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	read := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	write := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"error reply", redis.ErrNoScript, floodgate.ErrStoreUnavailable},
		{"crossslot reply", redis.ErrCrossSlot, floodgate.ErrStoreUnavailable},
		{"closed client", redis.ErrClosed, floodgate.ErrStoreUnavailable},
		{"pool timeout", redis.ErrPoolTimeout, floodgate.ErrStoreUnavailable},
		{"pool exhausted", redis.ErrPoolExhausted, floodgate.ErrStoreUnavailable},
		{"refused dial", dial, floodgate.ErrStoreUnavailable},
		{"wrapped dial", fmt.Errorf("redis: connecting: %w", dial), floodgate.ErrStoreUnavailable},
		{"canceled", context.Canceled, floodgate.ErrStoreUnavailable},
		{"deadline before sending", context.DeadlineExceeded, floodgate.ErrStoreUnavailable},
		{"reset while reading", read, floodgate.ErrIndeterminate},
		{"broken pipe while writing", write, floodgate.ErrIndeterminate},
		{"broken pipe in a connection's setup", &connsetup.Error{Err: os.NewSyscallError("write", syscall.EPIPE)}, floodgate.ErrStoreUnavailable},
		{"eof", io.EOF, floodgate.ErrIndeterminate},
		{"unknown", errors.New("something else"), floodgate.ErrIndeterminate},
		{"script stopped on a migrating slot", replyError("ERR Script attempted to access a non local key in a cluster node script"), floodgate.ErrIndeterminate},
	} {
		got := luascript.Classify(tc.err)
		if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("%s: Classify(%v) = %v, want %v wrapping the original", tc.name, tc.err, got, tc.want)
		}
		other := floodgate.ErrIndeterminate
		if tc.want == floodgate.ErrIndeterminate {
			other = floodgate.ErrStoreUnavailable
		}
		if errors.Is(got, other) {
			t.Errorf("%s: Classify(%v) = %v is also %v", tc.name, tc.err, got, other)
		}
	}
	if err := luascript.Classify(nil); err != nil {
		t.Errorf("Classify(nil) = %v", err)
	}
}

// replyError is an error reply of Redis, as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestInts checks the reply decoder without a server.
func TestInts(t *testing.T) {
	var two [2]int64
	if err := luascript.Ints([]any{int64(4), int64(-5)}, two[:]); err != nil || two != [2]int64{4, -5} {
		t.Fatalf("Ints = %v, %v", two, err)
	}
	if err := luascript.Ints([]any{}, nil); err != nil {
		t.Fatalf("empty array into no integers: %v", err)
	}
	for _, bad := range []any{nil, "OK", int64(1), []any{int64(1)}, []any{int64(1), 2}, []any{int64(1), nil}, []any{int64(1), int64(2), int64(3)}} {
		if err := luascript.Ints(bad, two[:]); !errors.Is(err, floodgate.ErrBadReply) {
			t.Errorf("Ints(%#v) = %v, want ErrBadReply", bad, err)
		}
	}
}
