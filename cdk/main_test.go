package outboxcdk

import (
	"os"
	"testing"

	"github.com/aws/jsii-runtime-go"
)

// TestMain stops the jsii kernel (Node), which the CDK packages start when
// they are loaded, so that it does not outlive the tests or leave its
// temporary folder behind.
func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}
