// Package proc starts the engines the tests and the demo run beside Go
// (DynamoDB Local, Apache Kafka brokers) as child processes that die with
// their parent, and finds the repository's scripts. It is the one copy for
// local/dynamolocal and internal/harness/testenv.
package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Process is a started command and the news of its exit.
type Process struct {
	Cmd *exec.Cmd
	// Exited is closed when Wait returned; Err is its error, set before.
	Exited chan struct{}
	Err    error
}

// Launch starts cmd in its own process group (and, on Linux, with a parent
// death signal: the kernel kills the child if the parent dies without
// killing it, so no engine is orphaned by a panic or a test timeout) and
// reaps it in the background.
//
// The goroutine that starts the child locks its OS thread and never unlocks
// it: Linux delivers the parent death signal when the thread that forked the
// child exits, not the process (golang/go#27505), and the Go runtime may
// retire idle threads. Locked, the thread lives exactly until the child has
// been reaped, then exits with the goroutine.
func Launch(cmd *exec.Cmd) (*Process, error) {
	cmd.SysProcAttr = sysProcAttr()
	// Wait returns this long after the process exits even if something
	// still holds its output pipes.
	cmd.WaitDelay = 2 * time.Second
	p := &Process{Cmd: cmd, Exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.Err = cmd.Wait()
		close(p.Exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Kill kills the process's whole group and waits until it is reaped.
func (p *Process) Kill() {
	KillGroup(p.Cmd.Process)
	<-p.Exited
}

// ErrNotFound is FindUp's error.
var ErrNotFound = errors.New("not found above the working directory")

// FindUp looks for rel (a slash-separated path, e.g.
// "scripts/install-kafka.sh") above the working directory (go test runs in
// the package directory; the demo in the repository), then above this
// source file (a binary built from this checkout, run elsewhere).
func FindUp(rel string) (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", ErrNotFound
}

// Tail is the last lines of a tool's output on one line, for an error
// message (make test keeps only an error's first line).
func Tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return strings.Join(lines, " | ")
}
