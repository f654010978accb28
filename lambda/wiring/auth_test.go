package wiring

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dynakafka/outbox/lambda/config"
)

// fakeSecrets answers GetSecretValue from a map of ARN to SecretString (nil
// for a binary secret); an ARN not in the map is an error.
type fakeSecrets map[string]*string

func (f fakeSecrets) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, o ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	v, ok := f[aws.ToString(in.SecretId)]
	if !ok {
		return nil, errors.New("AccessDeniedException: not allowed to read " + aws.ToString(in.SecretId))
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: v}, nil
}

func useSecrets(t *testing.T, f fakeSecrets) {
	t.Helper()
	old := newSecrets
	newSecrets = func(aws.Config) secretAPI { return f }
	t.Cleanup(func() { newSecrets = old })
}

func TestSCRAMSecret(t *testing.T) {
	ctx := context.Background()
	sm := fakeSecrets{
		"arn:ok":      aws.String(`{"username":"relay","password":"s3cret"}`),
		"arn:binary":  nil,
		"arn:notjson": aws.String("not json"),
		"arn:nopass":  aws.String(`{"username":"relay"}`),
	}
	for mode, want := range map[string]string{config.AuthSCRAM512: "SCRAM-SHA-512", config.AuthSCRAM256: "SCRAM-SHA-256"} {
		m, err := scramFromSecret(ctx, sm, "arn:ok", mode)
		if err != nil || m.Name() != want {
			t.Fatalf("%s: mechanism %v, %v; want %s", mode, m, err, want)
		}
	}
	for _, bad := range []string{"arn:binary", "arn:notjson", "arn:nopass"} {
		var ce *config.Error
		if _, err := scramFromSecret(ctx, sm, bad, config.AuthSCRAM512); !errors.As(err, &ce) || ce.Variable != "KAFKA_SASL_SECRET_ARN" {
			t.Fatalf("secret %s: err = %v, want an error naming KAFKA_SASL_SECRET_ARN", bad, err)
		}
	}
	if _, err := scramFromSecret(ctx, sm, "arn:missing", config.AuthSCRAM512); err == nil || !strings.Contains(err.Error(), "arn:missing") {
		t.Fatalf("err = %v", err)
	}
}

func TestMSKIAMUsesTheFunctionCredentials(t *testing.T) {
	mech := mskIAM(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret", SessionToken: "token"}, nil
	}))
	if mech.Name() != "AWS_MSK_IAM" {
		t.Fatalf("mechanism %s", mech.Name())
	}
	_, first, err := mech.Authenticate(context.Background(), "b-1.orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(first), `"x-amz-security-token":"token"`) || !strings.Contains(string(first), "AKID") {
		t.Fatalf("the signed handshake does not carry the function's credentials: %s", first)
	}
}

// pki is a certificate authority that issues server and client
// certificates for the tests.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

var serial int64

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &pki{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// issue returns a certificate and PKCS#8 key, PEM encoded, for a server on
// 127.0.0.1 or for a client.
func (p *pki) issue(t *testing.T, server bool) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "relay"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.Subject.CommonName = "kafka"
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k}))
}

// serverTLS is the brokers' TLS: a certificate from ca and, when clients is
// not nil, client certificates required and checked against it.
func serverTLS(t *testing.T, ca *pki, clients *pki) *tls.Config {
	t.Helper()
	c, k := ca.issue(t, true)
	pair, err := tls.X509KeyPair([]byte(c), []byte(k))
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clients != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clients.cert)
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc
}

func jsonSecret(t *testing.T, v any) *string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return aws.String(string(b))
}

// TestKafkaAuthAgainstKfake builds the publisher as a function does (the
// secrets read from a fake Secrets Manager) against kfake listening with TLS,
// mutual TLS and SASL/SCRAM, and checks that the right settings connect and
// the wrong ones fail at init.
func TestKafkaAuthAgainstKfake(t *testing.T) {
	brokersCA, clientsCA, otherCA := newPKI(t, "brokers"), newPKI(t, "clients"), newPKI(t, "other")
	clientCert, clientKey := clientsCA.issue(t, false)
	strangerCert, strangerKey := otherCA.issue(t, false)
	useSecrets(t, fakeSecrets{
		"arn:ca":           jsonSecret(t, map[string]string{"certificate": brokersCA.pem}),
		"arn:ca-pem":       aws.String(brokersCA.pem),
		"arn:other-ca":     jsonSecret(t, map[string]string{"certificate": otherCA.pem}),
		"arn:client":       jsonSecret(t, map[string]string{"certificate": clientCert, "privateKey": clientKey}),
		"arn:stranger":     jsonSecret(t, map[string]string{"certificate": strangerCert, "privateKey": strangerKey}),
		"arn:mismatch":     jsonSecret(t, map[string]string{"certificate": clientCert, "privateKey": strangerKey}),
		"arn:encrypted":    jsonSecret(t, map[string]string{"certificate": clientCert, "privateKey": clientKey, "privateKeyPassword": "pw"}),
		"arn:scram256":     jsonSecret(t, map[string]string{"username": "u256", "password": "p256"}),
		"arn:scram512":     jsonSecret(t, map[string]string{"username": "u512", "password": "p512"}),
		"arn:scram-wrong":  jsonSecret(t, map[string]string{"username": "u512", "password": "wrong"}),
		"arn:not-a-bundle": jsonSecret(t, map[string]string{"certificate": "hello"}),
	})
	newCluster := func(t *testing.T, opts ...kfake.Opt) []string {
		c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()
	}
	tlsBrokers := newCluster(t, kfake.TLS(serverTLS(t, brokersCA, nil)))
	mtlsBrokers := newCluster(t, kfake.TLS(serverTLS(t, brokersCA, clientsCA)))
	saslBrokers := newCluster(t, kfake.TLS(serverTLS(t, brokersCA, nil)), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "u256", "p256"), kfake.Superuser("SCRAM-SHA-512", "u512", "p512"))
	plainBrokers := newCluster(t)

	cases := []struct {
		name    string
		brokers []string
		cfg     config.Config
		wantErr string // "" = connects
		// short: the case fails by hanging (a TLS client on a plaintext
		// port waits for an answer that never comes), so a short deadline
		// ends it; its outcome does not depend on the machine's speed.
		short bool
	}{
		{name: "plaintext", brokers: plainBrokers, cfg: config.Config{Auth: config.AuthNone}},
		{name: "tls with the brokers' CA", brokers: tlsBrokers, cfg: config.Config{Auth: config.AuthTLS, TLSCASecretARN: "arn:ca"}},
		{name: "tls with the CA as plain PEM", brokers: tlsBrokers, cfg: config.Config{Auth: config.AuthTLS, TLSCASecretARN: "arn:ca-pem"}},
		{name: "tls with the system roots", brokers: tlsBrokers, cfg: config.Config{Auth: config.AuthTLS}, wantErr: "certificate"},
		{name: "tls with another CA", brokers: tlsBrokers, cfg: config.Config{Auth: config.AuthTLS, TLSCASecretARN: "arn:other-ca"}, wantErr: "certificate"},
		{name: "tls with no PEM in the CA secret", brokers: tlsBrokers, cfg: config.Config{Auth: config.AuthTLS, TLSCASecretARN: "arn:not-a-bundle"}, wantErr: "KAFKA_TLS_CA_SECRET_ARN"},
		{name: "tls to a plaintext broker", brokers: plainBrokers, cfg: config.Config{Auth: config.AuthTLS, TLSCASecretARN: "arn:ca"}, wantErr: "no broker answered", short: true},
		{name: "mtls", brokers: mtlsBrokers, cfg: config.Config{Auth: config.AuthMTLS, TLSCASecretARN: "arn:ca", TLSClientCertSecretARN: "arn:client"}},
		{name: "mtls with a certificate of another CA", brokers: mtlsBrokers,
			cfg: config.Config{Auth: config.AuthMTLS, TLSCASecretARN: "arn:ca", TLSClientCertSecretARN: "arn:stranger"}, wantErr: "no broker answered"},
		{name: "tls to a broker that wants a client certificate", brokers: mtlsBrokers,
			cfg: config.Config{Auth: config.AuthTLS, TLSCASecretARN: "arn:ca"}, wantErr: "no broker answered"},
		{name: "mtls with a key of another certificate", brokers: mtlsBrokers,
			cfg: config.Config{Auth: config.AuthMTLS, TLSCASecretARN: "arn:ca", TLSClientCertSecretARN: "arn:mismatch"}, wantErr: "KAFKA_TLS_CLIENT_CERT_SECRET_ARN"},
		{name: "mtls with an encrypted key", brokers: mtlsBrokers,
			cfg: config.Config{Auth: config.AuthMTLS, TLSCASecretARN: "arn:ca", TLSClientCertSecretARN: "arn:encrypted"}, wantErr: "encrypted private keys"},
		{name: "scram-sha-256", brokers: saslBrokers, cfg: config.Config{Auth: config.AuthSCRAM256, TLSCASecretARN: "arn:ca", SASLSecretARN: "arn:scram256"}},
		{name: "scram-sha-512", brokers: saslBrokers, cfg: config.Config{Auth: config.AuthSCRAM512, TLSCASecretARN: "arn:ca", SASLSecretARN: "arn:scram512"}},
		{name: "scram-sha-512 with a wrong password", brokers: saslBrokers,
			cfg: config.Config{Auth: config.AuthSCRAM512, TLSCASecretARN: "arn:ca", SASLSecretARN: "arn:scram-wrong"}, wantErr: "no broker answered"},
		{name: "scram-sha-256 with the 512 user", brokers: saslBrokers,
			cfg: config.Config{Auth: config.AuthSCRAM256, TLSCASecretARN: "arn:ca", SASLSecretARN: "arn:scram512"}, wantErr: "no broker answered"},
		{name: "a secret the role may not read", brokers: tlsBrokers, cfg: config.Config{Auth: config.AuthTLS, TLSCASecretARN: "arn:forbidden"}, wantErr: "KAFKA_TLS_CA_SECRET_ARN=arn:forbidden"},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			timeout := time.Minute
			if c.short {
				timeout = 2 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			cfg := c.cfg
			cfg.Brokers, cfg.LeaseDuration = c.brokers, 30*time.Second
			p, err := NewPublisher(ctx, cfg, aws.Config{}, log)
			if err == nil {
				p.Close()
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("init failed: %v", err)
			case c.wantErr != "" && err == nil:
				t.Fatalf("init succeeded, want an error with %q", c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Fatalf("init error %q does not say %q", err, c.wantErr)
			case err != nil && !strings.Contains(err.Error(), "KAFKA_") && !strings.Contains(err.Error(), "configuration:"):
				t.Fatalf("init error %q names no variable", err)
			}
		})
	}
}
