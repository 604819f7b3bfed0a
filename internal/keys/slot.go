package keys

// Slot returns the Redis Cluster slot of key (CRC16/XMODEM of its hash tag or
// of the whole key, modulo 16384), as specified by the Redis Cluster spec.
// Batched calls group keys by slot so each call stays within one node.
func Slot(key string) uint16 {
	key = Hashed(key)
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
