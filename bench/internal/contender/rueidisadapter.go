package contender

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// RueidisStoreClient lets Floodgate's Redis store (which speaks go-redis's
// Process interface) send its EVAL/EVALSHA commands through a rueidis
// client, which pipelines concurrent commands on shared connections. It
// exists to measure rueidis as the store's client base; it converts each
// command's arguments to strings and the reply back to go-redis's types.
type RueidisStoreClient struct {
	c rueidis.Client
}

var _ redisstore.Client = (*RueidisStoreClient)(nil)

// NewRueidisStoreClient wraps c.
func NewRueidisStoreClient(c rueidis.Client) (*RueidisStoreClient, error) {
	if c == nil {
		return nil, ErrNilDependency
	}
	return &RueidisStoreClient{c: c}, nil
}

// replyError is an error reply from Redis, in the form go-redis reports
// (its RedisError method makes redis.HasErrorPrefix and the store's error
// classification recognise it).
type replyError struct{ msg string }

func (e *replyError) Error() string { return e.msg }

// RedisError marks e as a reply from the server.
func (e *replyError) RedisError() {}

// valueSetter is the part of *redis.Cmd that stores a reply.
type valueSetter interface{ SetVal(any) }

// intsSetter is the part of *redis.IntSliceCmd that stores a reply (the
// store reads a batch's layered replies as integers).
type intsSetter interface{ SetVal([]int64) }

// stringSetter is the part of *redis.StringCmd that stores a reply (the
// store reads packed replies as one string).
type stringSetter interface{ SetVal(string) }

// Process sends cmd, an EVAL or EVALSHA built by the store
// (name, script or SHA, numkeys, keys..., args...), and stores the reply
// in it.
func (a *RueidisStoreClient) Process(ctx context.Context, cmd redis.Cmder) error {
	fail := func(err error) error {
		cmd.SetErr(err)
		return err
	}
	setter, isAny := cmd.(valueSetter)
	ints, isInts := cmd.(intsSetter)
	str, isString := cmd.(stringSetter)
	if !isAny && !isInts && !isString {
		return fail(fmt.Errorf("contender: rueidis adapter: command %T cannot hold a reply", cmd))
	}
	args := cmd.Args()
	if len(args) < 3 {
		return fail(fmt.Errorf("contender: rueidis adapter: %d arguments, want a script call", len(args)))
	}
	strs := make([]string, len(args))
	for i, v := range args {
		s, err := FormatArg(v)
		if err != nil {
			return fail(err)
		}
		strs[i] = s
	}
	nkeys, err := strconv.Atoi(strs[2])
	if err != nil || nkeys < 0 || 3+nkeys > len(strs) {
		return fail(fmt.Errorf("contender: rueidis adapter: bad numkeys %q", strs[2]))
	}
	built := a.c.B().Arbitrary(strs[:3]...).Keys(strs[3 : 3+nkeys]...).Args(strs[3+nkeys:]...).Build()
	res := a.c.Do(ctx, built)
	if isString {
		v, err := res.ToString()
		if err != nil {
			return fail(replyErr(err))
		}
		str.SetVal(v)
		return nil
	}
	if isInts {
		v, err := res.AsIntSlice()
		if err != nil {
			return fail(replyErr(err))
		}
		ints.SetVal(v)
		return nil
	}
	v, err := res.ToAny()
	if err != nil {
		return fail(replyErr(err))
	}
	setter.SetVal(v)
	return nil
}

// replyErr turns a rueidis error reply into one go-redis recognises as a
// reply from the server (redis.Error), and leaves other errors as they are.
func replyErr(err error) error {
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		return &replyError{msg: re.Error()}
	}
	return err
}

// FormatArg formats one command argument, of a type Floodgate's store
// builds commands with, as the string Redis receives.
func FormatArg(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case *string:
		return *x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case *int64:
		return strconv.FormatInt(*x, 10), nil
	case int:
		return strconv.Itoa(x), nil
	case []byte:
		return string(x), nil
	}
	return "", fmt.Errorf("contender: rueidis adapter: argument of type %T", v)
}
