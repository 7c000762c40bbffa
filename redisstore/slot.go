package redisstore

import "github.com/floodgate-rl/floodgate/algo"

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = 16384

// Slot returns the Redis Cluster hash slot of key (0..16383): the CRC16
// (XMODEM) of its hash tag (algo.HashTag) modulo 16384, as CLUSTER
// KEYSLOT computes it.
func Slot(key string) int {
	tag := algo.HashTag(key)
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^tag[i]]
	}
	return int(crc) % SlotCount
}

// crc16Table is the CRC16-CCITT (XMODEM, polynomial 0x1021) table.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
