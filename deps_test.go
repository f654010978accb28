package outbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The engine must stay storage- and broker-agnostic: nothing it imports,
// directly or not, may come from the AWS SDK or a Kafka client.
func TestRootImportsNoAWSOrKafka(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps returned only %v", deps)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/aws") || strings.HasPrefix(d, "github.com/twmb") {
			t.Errorf("the root package depends on %s", d)
		}
	}
}
