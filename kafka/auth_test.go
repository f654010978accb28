package kafka

import (
	"crypto/tls"
	"testing"
)

func TestTLSNilMeansSystemRoots(t *testing.T) {
	c := defaultCfg()
	TLS(nil)(&c)
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.tls == nil || c.tls.MinVersion != tls.VersionTLS12 || c.tls.RootCAs != nil {
		t.Fatalf("TLS(nil) gave %+v, want TLS 1.2+ with the system roots", c.tls)
	}
}
