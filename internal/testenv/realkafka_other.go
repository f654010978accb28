//go:build !linux

package testenv

import (
	"os"
	"syscall"
)

// brokerProcAttr: no parent death signal outside Linux; Main stops the
// brokers.
func brokerProcAttr() *syscall.SysProcAttr { return nil }

func killBrokerGroup(p *os.Process) { _ = p.Kill() }
