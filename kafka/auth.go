package kafka

import (
	"crypto/tls"

	"github.com/twmb/franz-go/pkg/sasl"
)

// TLS dials the brokers over TLS with config (cloned per connection; the
// server name is taken from the broker address when config leaves it empty).
// A nil config means TLS 1.2 or later with the system's root certificates,
// which is what Amazon MSK needs. Default: plaintext.
func TLS(config *tls.Config) Option {
	return func(c *cfg) { c.tls, c.tlsSet = config, true }
}

// SASL authenticates every connection with the first of mechs the broker
// supports. Use franz-go's mechanisms:
//
//	scram.Auth{User: u, Pass: p}.AsSha512Mechanism()        // SCRAM-SHA-512 (pkg/sasl/scram)
//	aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) { ... }) // MSK IAM (pkg/sasl/aws)
//
// Both need TLS on Amazon MSK. Default: no authentication.
func SASL(mechs ...sasl.Mechanism) Option {
	return func(c *cfg) { c.sasl = append(c.sasl, mechs...) }
}
