package redisstore

import "testing"

// TestSlot checks Slot against values CLUSTER KEYSLOT gives (documented in
// the Redis Cluster specification and checked on a real server in
// TestCluster).
func TestSlot(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"", 0},
		{"123456789", 0x31C3 % SlotCount}, // the CRC16/XMODEM check value
		{"foo", 12182},
		{"bar", 5061},
		{"hello", 866},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", Slot("foo{}{bar}")}, // empty tag: the whole key
		{"foo{{bar}}zap", Slot("{bar")},
		{"foo{bar}{zap}", Slot("bar")},
		{"fg:api:sw:{ruser42}", Slot("ruser42")},
	} {
		if got := Slot(tc.key); got != tc.want {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}
