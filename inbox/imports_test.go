package inbox

import (
	"os/exec"
	"strings"
	"testing"
)

// TestInboxImportsNoLambda: a service importing the inbox does not build
// aws-lambda-go, kfake or kadm; the Lambda adapter lives in
// inbox/lambdakafka.
func TestInboxImportsNoLambda(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/aws/aws-lambda-go", "github.com/twmb/franz-go/pkg/kfake", "github.com/twmb/franz-go/pkg/kadm", "github.com/aws/aws-sdk-go-v2/service/secretsmanager"} {
			if strings.HasPrefix(pkg, bad) {
				t.Errorf("package inbox imports %s", pkg)
			}
		}
	}
}
