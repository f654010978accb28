package config

import (
	"errors"
	"testing"
	"time"
)

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func base() map[string]string {
	return map[string]string{
		"OUTBOX_MESSAGES_TABLE":   "m",
		"OUTBOX_CONTROL_TABLE":    "c",
		"KAFKA_BOOTSTRAP_SERVERS": "b1:9092, b2:9092",
	}
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(getenv(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchSize != 500 || c.LeaseDuration != 30*time.Second || c.GapTimeout != 10*time.Second || c.Concurrency != 8 ||
		c.MaxMessageBytes != 1<<20 || c.Auth != AuthNone || len(c.Brokers) != 2 || c.Brokers[1] != "b2:9092" || c.BucketCount != 0 {
		t.Fatalf("defaults = %+v", c)
	}
	if c.RenewInterval() != 10*time.Second {
		t.Fatalf("renew interval %v", c.RenewInterval())
	}
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	cases := []struct {
		set, unset string
		value      string
		variable   string
	}{
		{unset: "OUTBOX_MESSAGES_TABLE", variable: "OUTBOX_MESSAGES_TABLE"},
		{unset: "OUTBOX_CONTROL_TABLE", variable: "OUTBOX_CONTROL_TABLE"},
		{unset: "KAFKA_BOOTSTRAP_SERVERS", variable: "KAFKA_BOOTSTRAP_SERVERS"},
		{set: "KAFKA_BOOTSTRAP_SERVERS", value: "localhost", variable: "KAFKA_BOOTSTRAP_SERVERS"},
		{set: "OUTBOX_BATCH_SIZE", value: "0", variable: "OUTBOX_BATCH_SIZE"},
		{set: "OUTBOX_BATCH_SIZE", value: "many", variable: "OUTBOX_BATCH_SIZE"},
		{set: "OUTBOX_BUCKET_COUNT", value: "5000", variable: "OUTBOX_BUCKET_COUNT"},
		{set: "OUTBOX_LEASE_DURATION", value: "30", variable: "OUTBOX_LEASE_DURATION"},
		{set: "OUTBOX_LEASE_DURATION", value: "5s", variable: "OUTBOX_LEASE_DURATION"},
		{set: "OUTBOX_GAP_TIMEOUT", value: "-1s", variable: "OUTBOX_GAP_TIMEOUT"},
		{set: "KAFKA_AUTH", value: "kerberos", variable: "KAFKA_AUTH"},
		{set: "KAFKA_AUTH", value: "sasl-scram-sha-512", variable: "KAFKA_SASL_SECRET_ARN"},
	}
	for _, c := range cases {
		t.Run(c.variable+"="+c.value, func(t *testing.T) {
			m := base()
			if c.unset != "" {
				delete(m, c.unset)
			}
			if c.set != "" {
				m[c.set] = c.value
			}
			_, err := Load(getenv(m))
			var e *Error
			if !errors.As(err, &e) || e.Variable != c.variable {
				t.Fatalf("err = %v, want an error naming %s", err, c.variable)
			}
		})
	}
}
