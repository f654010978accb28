package wiring

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/twmb/franz-go/pkg/sasl"
	saslaws "github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/lambda/config"
)

// secretAPI is the Secrets Manager call the TLS and SCRAM settings make.
type secretAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, o ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

var newSecrets = func(cfg aws.Config) secretAPI { return secretsmanager.NewFromConfig(cfg) }

// authOptions returns the publisher's TLS and SASL options for KAFKA_AUTH.
// Every mode but none uses TLS 1.2 or later; the brokers' certificates are
// checked against the system roots, or against KAFKA_TLS_CA_SECRET_ARN's
// bundle alone when it is given.
func authOptions(ctx context.Context, cfg config.Config, awsCfg aws.Config) ([]kafka.Option, error) {
	if cfg.Auth == config.AuthNone {
		return nil, nil
	}
	var sm secretAPI
	secrets := func() secretAPI {
		if sm == nil {
			sm = newSecrets(awsCfg)
		}
		return sm
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSCASecretARN != "" {
		pool, err := caFromSecret(ctx, secrets(), cfg.TLSCASecretARN)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	opts := []kafka.Option{kafka.TLS(tc)}
	switch cfg.Auth {
	case config.AuthTLS:
	case config.AuthMTLS:
		cert, err := clientCertFromSecret(ctx, secrets(), cfg.TLSClientCertSecretARN)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	case config.AuthSCRAM256, config.AuthSCRAM512:
		mech, err := scramFromSecret(ctx, secrets(), cfg.SASLSecretARN, cfg.Auth)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kafka.SASL(mech))
	case config.AuthMSKIAM:
		opts = append(opts, kafka.SASL(mskIAM(awsCfg.Credentials)))
	default:
		return nil, &config.Error{Variable: "KAFKA_AUTH", Value: cfg.Auth, Reason: "must be one of " + strings.Join(config.AuthModes, ", ")}
	}
	return opts, nil
}

// readSecret returns a secret's SecretString.
func readSecret(ctx context.Context, sm secretAPI, variable, arn string) (string, error) {
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return "", fmt.Errorf("read %s=%s: %w", variable, arn, err)
	}
	if out.SecretString == nil {
		return "", &config.Error{Variable: variable, Value: arn, Reason: "the secret has no SecretString (a binary secret); store it as a string"}
	}
	return *out.SecretString, nil
}

// scramFromSecret reads {"username": ..., "password": ...} (the shape MSK's
// SCRAM secrets use) and returns the SCRAM mechanism KAFKA_AUTH names.
func scramFromSecret(ctx context.Context, sm secretAPI, arn, mode string) (sasl.Mechanism, error) {
	const variable = "KAFKA_SASL_SECRET_ARN"
	raw, err := readSecret(ctx, sm, variable, arn)
	if err != nil {
		return nil, err
	}
	var s struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if json.Unmarshal([]byte(raw), &s) != nil || s.Username == "" || s.Password == "" {
		return nil, &config.Error{Variable: variable, Value: arn, Reason: `the secret must be a JSON string {"username": "...", "password": "..."}`}
	}
	auth := scram.Auth{User: s.Username, Pass: s.Password}
	if mode == config.AuthSCRAM256 {
		return auth.AsSha256Mechanism(), nil
	}
	return auth.AsSha512Mechanism(), nil
}

// caFromSecret reads a PEM bundle of certificate authorities: the secret is
// {"certificate": "<PEM>"} (the shape Lambda's own Kafka event sources use
// for SERVER_ROOT_CA_CERTIFICATE) or the PEM text itself.
func caFromSecret(ctx context.Context, sm secretAPI, arn string) (*x509.CertPool, error) {
	const variable = "KAFKA_TLS_CA_SECRET_ARN"
	raw, err := readSecret(ctx, sm, variable, arn)
	if err != nil {
		return nil, err
	}
	pem := raw
	if !strings.HasPrefix(strings.TrimSpace(raw), "-----BEGIN") {
		var s struct {
			Certificate string `json:"certificate"`
		}
		if json.Unmarshal([]byte(raw), &s) != nil || s.Certificate == "" {
			return nil, &config.Error{Variable: variable, Value: arn, Reason: `the secret must be PEM text or a JSON string {"certificate": "<PEM bundle>"}`}
		}
		pem = s.Certificate
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(pem)) {
		return nil, &config.Error{Variable: variable, Value: arn, Reason: "the secret holds no PEM certificate (-----BEGIN CERTIFICATE-----)"}
	}
	return pool, nil
}

// clientCertFromSecret reads {"certificate": "<PEM chain>", "privateKey":
// "<PEM>"} (the shape Lambda's own Kafka event sources use for
// CLIENT_CERTIFICATE_TLS_AUTH; the chain starts with the client's
// certificate).
func clientCertFromSecret(ctx context.Context, sm secretAPI, arn string) (tls.Certificate, error) {
	const variable = "KAFKA_TLS_CLIENT_CERT_SECRET_ARN"
	raw, err := readSecret(ctx, sm, variable, arn)
	if err != nil {
		return tls.Certificate{}, err
	}
	var s struct {
		Certificate        string `json:"certificate"`
		PrivateKey         string `json:"privateKey"`
		PrivateKeyPassword string `json:"privateKeyPassword"`
	}
	if json.Unmarshal([]byte(raw), &s) != nil || s.Certificate == "" || s.PrivateKey == "" {
		return tls.Certificate{}, &config.Error{Variable: variable, Value: arn,
			Reason: `the secret must be a JSON string {"certificate": "<PEM chain>", "privateKey": "<PEM key>"}`}
	}
	if s.PrivateKeyPassword != "" {
		return tls.Certificate{}, &config.Error{Variable: variable, Value: arn,
			Reason: "encrypted private keys are not supported: store the key unencrypted (Secrets Manager encrypts the secret) and drop privateKeyPassword"}
	}
	cert, err := tls.X509KeyPair([]byte(s.Certificate), []byte(s.PrivateKey))
	if err != nil {
		return tls.Certificate{}, &config.Error{Variable: variable, Value: arn, Reason: "the certificate and private key do not form a pair: " + err.Error()}
	}
	return cert, nil
}

// mskIAM signs the MSK IAM handshake (SASL mechanism AWS_MSK_IAM) with the
// function's own credentials, refreshed by the SDK's provider chain.
func mskIAM(creds aws.CredentialsProvider) sasl.Mechanism {
	return saslaws.ManagedStreamingIAM(func(ctx context.Context) (saslaws.Auth, error) {
		c, err := creds.Retrieve(ctx)
		if err != nil {
			return saslaws.Auth{}, fmt.Errorf("MSK IAM: retrieve the function's AWS credentials: %w", err)
		}
		return saslaws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken, UserAgent: "dynakafka-outbox"}, nil
	})
}
