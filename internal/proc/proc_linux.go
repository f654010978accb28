package proc

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig: the kernel kills the child if its parent dies without killing it (a
	// panic, a test timeout, SIGKILL), so no engine is orphaned.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func KillGroup(p *os.Process) {
	// The group id is the pid (Setpgid); kill the group so that anything
	// the child started goes too. An error means it is already gone.
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}
