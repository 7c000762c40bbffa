package luascript

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/redis/go-redis/v9"
)

func TestCheckClient(t *testing.T) {
	live := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: CheckClient sends nothing
	defer live.Close()
	for _, tc := range []struct {
		name string
		c    Client
		want string // "" for no error
	}{
		{"nil", nil, "x store: nil client (<nil>)"},
		{"nil pointer", (*redis.Client)(nil), "x store: nil client (*redis.Client)"},
		{"zero replicawait client", &replicawait.Client{}, "x store: replicawait: unsupported: a zero replicawait.Client"},
		{"client", live, ""},
	} {
		err := CheckClient(tc.c, "x store")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: CheckClient = %v, want nil", tc.name, err)
		case tc.want != "" && (!errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: CheckClient = %v, want ErrInvalidPolicy with %q", tc.name, err, tc.want)
		}
	}
}
