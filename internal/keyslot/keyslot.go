// Package keyslot computes Redis Cluster hash slots the way Redis does:
// CRC16 (XMODEM) of the key, or of its hash tag (the part between the
// first "{" and the next "}", when not empty), modulo 16384.
package keyslot

import "strings"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Of returns the hash slot of key.
func Of(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}
