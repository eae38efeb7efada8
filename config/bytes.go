package config

import (
	"math"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes, written as a whole number of bytes or with a binary unit: 512KiB, 256MiB,
// 4GiB, 1TiB. Only the binary units are read, so that "GB" (1000³ to some, 1024³ to nats-server's
// configuration) is never guessed at.
type ByteSize int64

// byteUnits are the units ParseByteSize reads, largest first.
var byteUnits = []struct {
	suffix string
	size   int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// ParseByteSize reads a size as FromEnv does (through Decode): decimal digits, optionally followed by one of KiB, MiB, GiB
// or TiB (case matters, no space); a sign is allowed, so that Validate can name a negative size.
func ParseByteSize(s string) (ByteSize, error) {
	unit := int64(1)
	num := s
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, unit = n, u.size
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || num == "" || num[0] == '+' {
		return 0, errNotA("a size in bytes (a whole number, or with a unit: 512KiB, 256MiB, 4GiB)")
	}
	if n > math.MaxInt64/unit || n < math.MinInt64/unit {
		return 0, errNotA("a size that fits in 64 bits")
	}
	return ByteSize(n * unit), nil
}

// Decode implements envconfig.Decoder: it reads s as ParseByteSize does, and keeps its error.
func (b *ByteSize) Decode(s string) error {
	n, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = n
	return nil
}

// String writes the size with the largest binary unit that divides it, as Usage and the log show it.
func (b ByteSize) String() string {
	for _, u := range byteUnits {
		if b != 0 && int64(b)%u.size == 0 {
			return strconv.FormatInt(int64(b)/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
