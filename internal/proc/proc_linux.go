package dynamolocal

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig: the kernel kills java if its parent dies without Stop (a
	// panic, a test timeout, SIGKILL), so no engine is orphaned.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(p *os.Process) {
	// The group id is the pid (Setpgid); kill the group so that anything
	// java started goes too. An error means it is already gone.
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}
