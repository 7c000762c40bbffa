package connlimit_test

import (
	"errors"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/internal/connlimit"
)

// TestSide: each listener beside the public ones gets SideMax, or a
// quarter of the reserve the public budget leaves if less, at least 8.
func TestSide(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		public int
		want   int
	}{
		{256, connlimit.Default(256), 32},
		{128, connlimit.Default(128), 16},
		{1024, connlimit.Default(1024), 64},
		{65536, connlimit.Default(65536), 64},
		{1 << 20, 2048, 64},                             // the deploy kit's --max-connections
		{1024, 1000, 8},                                 // a public budget above the default
		{256, 100000, 8},                                // above the file limit itself
		{^uint64(0), connlimit.Default(^uint64(0)), 64}, // unlimited
	} {
		if got := connlimit.Side(c.nofile, c.public); got != c.want {
			t.Errorf("Side(%d, %d) = %d, want %d", c.nofile, c.public, got, c.want)
		}
	}
}

// labelled returns the value of name's series labelled listener=value.
func labelled(t *testing.T, reg *prometheus.Registry, name, value string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "listener" && lp.GetValue() == value {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestSidesApart: the public budget and two side budgets register on one
// registry without a collision; a side budget closes its own listener's
// idle connection for room, counted under its name, and touches neither
// the public budget's metrics nor the other side's.
func TestSidesApart(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := connlimit.New(100, reg); err != nil {
		t.Fatal(err)
	}
	sides, err := connlimit.NewSides(reg)
	if err != nil {
		t.Fatal(err)
	}
	health, err := sides.New("health", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sides.New("admin", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := sides.New("x", 0); err == nil {
		t.Error("a side budget of 0: no error")
	}
	addr := serve(t, health, nil)
	a, b := dial(t, addr), dial(t, addr)
	a.get(t, "/")
	eventually(t, "a idle", func() bool { v, _ := labelled(t, reg, "floodgate_side_connections_idle", "health"); return v == 1 })
	b.get(t, "/")
	eventually(t, "b idle", func() bool { v, _ := labelled(t, reg, "floodgate_side_connections_idle", "health"); return v == 2 })
	c := dial(t, addr)
	c.get(t, "/")
	if _, err := a.answer(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("the connection idle longest: %v, want it closed", err)
	}
	want := map[string]map[string]float64{
		"health": {"floodgate_side_connections_max": 2, "floodgate_side_connections_open": 2, "floodgate_side_connections_idle_closed_total": 1},
		"admin":  {"floodgate_side_connections_max": 3, "floodgate_side_connections_open": 0, "floodgate_side_connections_idle_closed_total": 0, "floodgate_side_connections_waits_total": 0},
	}
	eventually(t, "2 open", func() bool { v, _ := labelled(t, reg, "floodgate_side_connections_open", "health"); return v == 2 })
	for listener, ms := range want {
		for name, w := range ms {
			if got, ok := labelled(t, reg, name, listener); !ok || got != w {
				t.Errorf("%s{listener=%q}: %v (present %v), want %v", name, listener, got, ok, w)
			}
		}
	}
	for _, name := range []string{"floodgate_connections_open", "floodgate_connections_idle", "floodgate_connections_idle_closed_total", "floodgate_connections_waits_total"} {
		if got := metric(t, reg, name); got != 0 {
			t.Errorf("%s %v: the side budget counted in the public one", name, got)
		}
	}
	if got := metric(t, reg, "floodgate_connections_max"); got != 100 {
		t.Errorf("floodgate_connections_max %v, want 100", got)
	}
}
