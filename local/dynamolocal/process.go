package dynamolocal

import (
	"os/exec"
	"runtime"
	"time"
)

// process is a started command and the news of its exit.
type process struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when Wait returned
	waitErr error         // set before exited is closed
}

// launch starts cmd in its own process group (and, on Linux, with a parent
// death signal) and reaps it in the background.
//
// The goroutine that starts the child locks its OS thread and never unlocks
// it: Linux delivers the parent death signal when the thread that forked the
// child exits, not the process (golang/go#27505), and the Go runtime may
// retire idle threads. Locked, the thread lives exactly until the child has
// been reaped, then exits with the goroutine.
func launch(cmd *exec.Cmd) (*process, error) {
	cmd.SysProcAttr = sysProcAttr()
	// Wait returns this long after the process exits even if something
	// still holds its output pipes.
	cmd.WaitDelay = 2 * time.Second
	p := &process{cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}
