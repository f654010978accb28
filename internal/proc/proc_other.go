//go:build !unix

package proc

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func KillGroup(p *os.Process) { _ = p.Kill() }
