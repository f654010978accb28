package kafkalocal

import (
	"encoding/base64"
	"testing"
)

// TestClusterIDNeverLooksLikeAnOption: kafka-storage format takes the id as
// the value of --cluster-id, and its parser reads a value that starts with
// '-' as the next option (CI failed on that once in 64 runs). Of 10,000
// unfiltered draws, about 156 would start with '-'.
func TestClusterIDNeverLooksLikeAnOption(t *testing.T) {
	for range 10000 {
		id := clusterID()
		if id[0] == '-' {
			t.Fatalf("cluster id %q starts with '-'", id)
		}
		if b, err := base64.RawURLEncoding.DecodeString(id); err != nil || len(b) != 16 {
			t.Fatalf("cluster id %q is not 16 bytes of base64url: %v", id, err)
		}
	}
}
