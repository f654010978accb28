package testenv

import (
	"os"
	"syscall"
)

// brokerProcAttr: its own process group, killed whole; Pdeathsig: the
// kernel kills the broker if the test binary dies without Main (a panic, a
// test timeout, SIGKILL), so no broker is orphaned.
func brokerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killBrokerGroup(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }
