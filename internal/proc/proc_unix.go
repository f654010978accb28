//go:build unix && !linux

package proc

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr {
	// No parent death signal outside Linux: kill the group (KillGroup).
	return &syscall.SysProcAttr{Setpgid: true}
}

func KillGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}
