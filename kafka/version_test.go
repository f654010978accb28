package kafka

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// minFranzGo is the oldest franz-go the transactional mode may run on. Its
// v1.21.6 fixed EndTransaction (CHANGELOG, v1.21.6: "If EndTransaction
// failed with an unconfirmed outcome (a transport error, exhausted retries,
// or UNKNOWN_SERVER_ERROR), the documented abort retry was a wire no-op and
// the next transaction could silently commit the prior "failed"
// transaction's records under KIP-890 part 2"; since then the producer id is
// reloaded, which fence-aborts them). TxnPublisher reports a failed commit
// as nothing acknowledged, so the relay publishes those messages again: with
// the bug the "failed" transaction's records could be committed with the
// next one, beside their republished copies. (TxnPublisher also drops its
// client after a failed commit, which re-initialises the producer; the fix
// makes that not the only guard.)
var minFranzGo = [3]int{1, 21, 6}

// TestFranzGoHasTheEndTransactionFix reads the franz-go version this module
// requires (go.mod; the build may select a newer one, never an older one)
// and fails if it is older than minFranzGo, or if a replace directive
// swaps franz-go for something this test cannot vouch for.
func TestFranzGoHasTheEndTransactionFix(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var found string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "require")))
		if len(f) >= 2 && f[0] == "github.com/twmb/franz-go" {
			found = f[1]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "replace") && strings.Contains(line, "github.com/twmb/franz-go ") {
			t.Fatalf("go.mod replaces franz-go (%s): check that the replacement has the v1.21.6 EndTransaction fix and adjust this test", strings.TrimSpace(line))
		}
	}
	if found == "" {
		t.Fatal("go.mod does not require github.com/twmb/franz-go")
	}
	v, err := semver(found)
	if err != nil {
		t.Fatalf("franz-go version %q: %v", found, err)
	}
	if older(v, minFranzGo) {
		t.Fatalf("go.mod requires franz-go %s, older than v%d.%d.%d, which fixed EndTransaction; TxnPublisher needs it: raise github.com/twmb/franz-go", found, minFranzGo[0], minFranzGo[1], minFranzGo[2])
	}
	t.Logf("franz-go %s (at least v%d.%d.%d)", found, minFranzGo[0], minFranzGo[1], minFranzGo[2])
}

// semver parses vMAJOR.MINOR.PATCH, ignoring a pre-release or build suffix.
func semver(s string) ([3]int, error) {
	var v [3]int
	core, _, _ := strings.Cut(strings.TrimPrefix(s, "v"), "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return v, strconv.ErrSyntax
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, err
		}
		v[i] = n
	}
	return v, nil
}

func older(v, than [3]int) bool {
	for i := range v {
		if v[i] != than[i] {
			return v[i] < than[i]
		}
	}
	return false
}

func TestOlder(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{{"v1.21.5", true}, {"v1.21.6", false}, {"v1.20.9", true}, {"v1.22.0", false}, {"v2.0.0", false}, {"v0.9.99", true}} {
		v, err := semver(c.v)
		if err != nil || older(v, minFranzGo) != c.want {
			t.Errorf("%s: older=%v err=%v, want %v", c.v, older(v, minFranzGo), err, c.want)
		}
	}
}
