//go:build unix && !linux

package dynamolocal

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr {
	// No parent death signal outside Linux: call Stop (testenv.Main does).
	return &syscall.SysProcAttr{Setpgid: true}
}

func killGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}
