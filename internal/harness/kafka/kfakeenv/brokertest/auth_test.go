package brokertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"github.com/dynakafka/outbox/kafka"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func TestSASLScram(t *testing.T) {
	topic := testenv.Name(t, "auth")
	k := kfakeenv.Kafka(t,
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "relay", "s3cret"),
		kfake.SeedTopics(1, topic),
	)
	kfakeenv.RequireKfake(t, k)

	tests := []struct {
		name    string
		pass    string
		wantErr bool
	}{
		{"right password", "s3cret", false},
		{"wrong password", "guess", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// kgo retries a connection the broker closes after a failed
			// authentication, so the wrong password shows as the check
			// running out of time.
			timeout := 10 * time.Second
			if tt.wantErr {
				timeout = 2 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			mech := scram.Auth{User: "relay", Pass: tt.pass}.AsSha512Mechanism()
			p, err := kafka.NewPublisher(ctx, k.Brokers, kafka.SASL(mech), kafka.Topics(topic))
			if tt.wantErr {
				if err == nil {
					p.Close()
					t.Fatal("NewPublisher authenticated with the wrong password")
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			defer p.Close()
			msgs := messages(topic, 2, sameKey("k"))
			if acked, err := p.Publish(ctx, msgs); acked != 2 || err != nil {
				t.Fatalf("Publish = %d, %v", acked, err)
			}
			if hwm := k.Cluster.PartitionInfo(topic, 0).HighWatermark; hwm != 2 {
				t.Fatalf("high watermark %d, want 2", hwm)
			}
		})
	}
}

// selfSigned returns a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kfake"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	topic := testenv.Name(t, "tls")
	k := kfakeenv.Kafka(t,
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}),
		kfake.SeedTopics(1, topic),
	)
	kfakeenv.RequireKfake(t, k)

	p := newPublisher(t, k.KafkaCluster, kafka.TLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), kafka.Topics(topic))
	msgs := messages(topic, 3, sameKey("k"))
	if acked, err := p.Publish(testCtx(t), msgs); acked != 3 || err != nil {
		t.Fatalf("Publish = %d, %v", acked, err)
	}
	if hwm := k.Cluster.PartitionInfo(topic, 0).HighWatermark; hwm != 3 {
		t.Fatalf("high watermark %d, want 3", hwm)
	}
}
