package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dynakafka/outbox/internal/proc"
)

// kfakeServerDir is the module, relative to the repository, whose package
// server runs a kfake cluster in a process of its own.
const kfakeServerDir = "internal/harness/kafka/kfakeenv"

var (
	kfakeBuildOnce sync.Once
	kfakeBin       string
	kfakeBuildErr  error
	kfakeTmp       string
)

// startKfakeServer starts a kfake cluster of three brokers in a process of
// its own (internal/harness/kafka/kfakeenv/server, built once per test binary) and returns
// its brokers. The process ends when the test does, or when this test
// binary dies (it exits when its standard input closes).
func startKfakeServer(t testing.TB) []string {
	t.Helper()
	kfakeBuildOnce.Do(func() { kfakeBin, kfakeBuildErr = buildKfakeServer() })
	if kfakeBuildErr != nil {
		t.Fatalf("testenv.Kafka: %v", kfakeBuildErr)
	}
	cmd := exec.Command(kfakeBin, "-brokers", "3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv.Kafka: start %s: %v", kfakeBin, err)
	}
	stop := func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	brokers, ok := strings.CutPrefix(strings.TrimSpace(line), "kfake-server: listening ")
	if err != nil || !ok || brokers == "" {
		stop()
		t.Fatalf("testenv.Kafka: %s answered %q (%v), want its brokers\n%s", kfakeBin, line, err, stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	t.Cleanup(stop)
	return splitBrokers(brokers)
}

// buildKfakeServer builds internal/harness/kafka/kfakeenv/server with the go command, in
// its own module (GOWORK=off: its go.mod says what it needs).
func buildKfakeServer() (string, error) {
	mod, err := proc.FindUp(kfakeServerDir + "/go.mod")
	if err != nil {
		return "", fmt.Errorf("cannot find %s/go.mod above the working directory; run the tests from the repository", kfakeServerDir)
	}
	dir, err := os.MkdirTemp("", "outbox-kfake-")
	if err != nil {
		return "", err
	}
	kfakeTmp = dir
	bin := filepath.Join(dir, "kfake-server")
	cmd := exec.Command("go", "build", "-o", bin, "./server")
	cmd.Dir = filepath.Dir(mod)
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the kfake server (%s/server): %v: %s", kfakeServerDir, err, proc.Tail(out))
	}
	return bin, nil
}

// removeKfakeServer removes the binary buildKfakeServer built (Main).
func removeKfakeServer() {
	if kfakeTmp != "" {
		os.RemoveAll(kfakeTmp)
	}
}
