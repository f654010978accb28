package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
)

// maxNameBase bounds the readable part of a name; DynamoDB table names may
// have 255 characters and Kafka topic names 249.
const maxNameBase = 80

// Name returns a name unique to this call, made of the prefix, the test's
// name and a random suffix, for example "orders-TestRelay-drain-5f0c1a9e2b7d".
// It has only ASCII letters, digits and '-', so it is a legal DynamoDB table
// name and Kafka topic name (and avoids Kafka's '.'/'_' metric collisions).
func Name(t testing.TB, prefix string) string {
	t.Helper()
	var random [6]byte
	if _, err := rand.Read(random[:]); err != nil {
		t.Fatalf("testenv.Name: %v", err)
	}
	base := sanitize(prefix + "-" + t.Name())
	if len(base) > maxNameBase {
		base = strings.TrimRight(base[:maxNameBase], "-")
	}
	if base == "" {
		return "t-" + hex.EncodeToString(random[:])
	}
	return base + "-" + hex.EncodeToString(random[:])
}

// sanitize maps every run of characters other than ASCII letters and digits
// to a single '-', and trims '-' at both ends.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	return b.String()
}
