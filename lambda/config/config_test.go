package config

import (
	"errors"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func base() map[string]string {
	return map[string]string{
		"OUTBOX_MESSAGES_TABLE":   "m",
		"OUTBOX_CONTROL_TABLE":    "c",
		"KAFKA_BOOTSTRAP_SERVERS": "b1:9092, b2:9092",
		"KAFKA_AUTH":              "none",
	}
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(getenv(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchSize != 500 || c.LeaseDuration != 30*time.Second || c.GapTimeout != 10*time.Second || c.Concurrency != 0 ||
		c.Auth != AuthNone || len(c.Brokers) != 2 || c.Brokers[1] != "b2:9092" ||
		c.Region != "us-east-1" || c.Topics != nil {
		t.Fatalf("defaults = %+v", c)
	}
	if c.RenewInterval() != 10*time.Second {
		t.Fatalf("renew interval %v", c.RenewInterval())
	}
}

// variables lists the variables a Load error names, sorted.
func variables(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	var walk func(error)
	walk = func(err error) {
		var e *Error
		switch x := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		default:
			if !errors.As(err, &e) {
				t.Fatalf("%T %v is not a *config.Error", err, err)
			}
			out = append(out, e.Variable)
		}
	}
	if err != nil {
		walk(err)
	}
	sort.Strings(out)
	return out
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	cases := []struct {
		set, unset string
		value      string
		variable   string
		reason     string // a substring of the error
	}{
		{unset: "OUTBOX_MESSAGES_TABLE", variable: "OUTBOX_MESSAGES_TABLE", reason: "required"},
		{unset: "OUTBOX_CONTROL_TABLE", variable: "OUTBOX_CONTROL_TABLE", reason: "required"},
		{unset: "KAFKA_BOOTSTRAP_SERVERS", variable: "KAFKA_BOOTSTRAP_SERVERS", reason: "required"},
		{set: "KAFKA_BOOTSTRAP_SERVERS", value: "localhost", variable: "KAFKA_BOOTSTRAP_SERVERS", reason: "host:port"},
		{set: "KAFKA_BOOTSTRAP_SERVERS", value: "b1:9092,b2:kafka", variable: "KAFKA_BOOTSTRAP_SERVERS", reason: "1..65535"},
		{set: "KAFKA_BOOTSTRAP_SERVERS", value: "b1:0", variable: "KAFKA_BOOTSTRAP_SERVERS", reason: "1..65535"},
		{set: "OUTBOX_BATCH_SIZE", value: "0", variable: "OUTBOX_BATCH_SIZE", reason: "1..10000"},
		{set: "OUTBOX_BATCH_SIZE", value: "many", variable: "OUTBOX_BATCH_SIZE", reason: "1..10000"},
		{set: "OUTBOX_REGION", value: "EU_WEST", variable: "OUTBOX_REGION", reason: "a-z, 0-9"},
		{set: "OUTBOX_CONCURRENCY", value: "257", variable: "OUTBOX_CONCURRENCY", reason: "0..256"},
		{set: "OUTBOX_LEASE_DURATION", value: "30", variable: "OUTBOX_LEASE_DURATION", reason: "Go duration"},
		{set: "OUTBOX_LEASE_DURATION", value: "5s", variable: "OUTBOX_LEASE_DURATION", reason: "12s..15m0s"},
		// Below the 12 s that renewals and the cut-off need on a loaded container.
		{set: "OUTBOX_LEASE_DURATION", value: "11s", variable: "OUTBOX_LEASE_DURATION", reason: "12s..15m0s"},
		{set: "OUTBOX_LEASE_DURATION", value: "24h", variable: "OUTBOX_LEASE_DURATION", reason: "12s..15m0s"},
		{set: "OUTBOX_GAP_TIMEOUT", value: "-1s", variable: "OUTBOX_GAP_TIMEOUT", reason: "1s..1h0m0s"},
		{set: "OUTBOX_GAP_TIMEOUT", value: "1ns", variable: "OUTBOX_GAP_TIMEOUT", reason: "1s..1h0m0s"},
		{set: "OUTBOX_GAP_TIMEOUT", value: "2h", variable: "OUTBOX_GAP_TIMEOUT", reason: "1s..1h0m0s"},
		{set: "OUTBOX_TOPICS", value: "orders,bad topic", variable: "OUTBOX_TOPICS", reason: `"bad topic"`},
		{unset: "KAFKA_AUTH", variable: "KAFKA_AUTH", reason: "required: one of none, tls, mtls, sasl-scram-sha-256, sasl-scram-sha-512, msk-iam"},
		{set: "KAFKA_AUTH", value: "kerberos", variable: "KAFKA_AUTH", reason: "must be one of"},
		{set: "KAFKA_AUTH", value: "sasl-scram-sha-512", variable: "KAFKA_SASL_SECRET_ARN", reason: "required when KAFKA_AUTH=sasl-scram-sha-512"},
		{set: "KAFKA_AUTH", value: "sasl-scram-sha-256", variable: "KAFKA_SASL_SECRET_ARN", reason: "required when KAFKA_AUTH=sasl-scram-sha-256"},
		{set: "KAFKA_AUTH", value: "mtls", variable: "KAFKA_TLS_CLIENT_CERT_SECRET_ARN", reason: "required when KAFKA_AUTH=mtls"},
		{set: "KAFKA_SASL_SECRET_ARN", value: "arn:s", variable: "KAFKA_SASL_SECRET_ARN", reason: "does not use it"},
		{set: "KAFKA_TLS_CLIENT_CERT_SECRET_ARN", value: "arn:c", variable: "KAFKA_TLS_CLIENT_CERT_SECRET_ARN", reason: "does not use it"},
		{set: "KAFKA_TLS_CA_SECRET_ARN", value: "arn:ca", variable: "KAFKA_TLS_CA_SECRET_ARN", reason: "does not use TLS"},
		{set: "OUTBOX_DYNAMODB_ENDPOINT", value: "localhost:8000", variable: "OUTBOX_DYNAMODB_ENDPOINT", reason: "http:// or https:// URL"},
		{set: "OUTBOX_DYNAMODB_ENDPOINT", value: "http//localhost:8000", variable: "OUTBOX_DYNAMODB_ENDPOINT", reason: "http:// or https:// URL"},
		{set: "OUTBOX_DYNAMODB_ENDPOINT", value: "ftp://localhost:8000", variable: "OUTBOX_DYNAMODB_ENDPOINT", reason: "http:// or https:// URL"},
		{set: "OUTBOX_DYNAMODB_ENDPOINT", value: "http://", variable: "OUTBOX_DYNAMODB_ENDPOINT", reason: "http:// or https:// URL"},
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
			if got := variables(t, err); !reflect.DeepEqual(got, []string{c.variable}) {
				t.Fatalf("err = %v, want one error naming %s", err, c.variable)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("err = %v, want it to say %q", err, c.reason)
			}
		})
	}
}

// TestLoadReportsEveryInvalidVariable: one deployment, one list of fixes.
func TestLoadReportsEveryInvalidVariable(t *testing.T) {
	_, err := Load(getenv(map[string]string{
		"OUTBOX_BATCH_SIZE":     "0",
		"OUTBOX_GAP_TIMEOUT":    "1ns",
		"OUTBOX_LEASE_DURATION": "24h",
		"KAFKA_AUTH":            "mtls",
	}))
	want := []string{"KAFKA_BOOTSTRAP_SERVERS", "KAFKA_TLS_CLIENT_CERT_SECRET_ARN", "OUTBOX_BATCH_SIZE", "OUTBOX_CONTROL_TABLE",
		"OUTBOX_GAP_TIMEOUT", "OUTBOX_LEASE_DURATION", "OUTBOX_MESSAGES_TABLE"}
	if got := variables(t, err); !reflect.DeepEqual(got, want) {
		t.Fatalf("errors name %v, want %v:\n%v", got, want, err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("errors.As finds no *Error in %v", err)
	}
}

func TestLoadAuthModes(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want Config // only the auth fields are compared
	}{
		{"tls", map[string]string{"KAFKA_AUTH": "tls"}, Config{Auth: AuthTLS}},
		{"tls with a CA", map[string]string{"KAFKA_AUTH": "tls", "KAFKA_TLS_CA_SECRET_ARN": "arn:ca"}, Config{Auth: AuthTLS, TLSCASecretARN: "arn:ca"}},
		{"mtls", map[string]string{"KAFKA_AUTH": "mtls", "KAFKA_TLS_CLIENT_CERT_SECRET_ARN": "arn:c", "KAFKA_TLS_CA_SECRET_ARN": "arn:ca"},
			Config{Auth: AuthMTLS, TLSClientCertSecretARN: "arn:c", TLSCASecretARN: "arn:ca"}},
		{"scram 256", map[string]string{"KAFKA_AUTH": "sasl-scram-sha-256", "KAFKA_SASL_SECRET_ARN": "arn:s"}, Config{Auth: AuthSCRAM256, SASLSecretARN: "arn:s"}},
		{"scram 512 with a CA", map[string]string{"KAFKA_AUTH": "sasl-scram-sha-512", "KAFKA_SASL_SECRET_ARN": "arn:s", "KAFKA_TLS_CA_SECRET_ARN": "arn:ca"},
			Config{Auth: AuthSCRAM512, SASLSecretARN: "arn:s", TLSCASecretARN: "arn:ca"}},
		{"msk iam", map[string]string{"KAFKA_AUTH": "msk-iam"}, Config{Auth: AuthMSKIAM}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			for k, v := range c.env {
				m[k] = v
			}
			got, err := Load(getenv(m))
			if err != nil {
				t.Fatal(err)
			}
			if got.Auth != c.want.Auth || got.SASLSecretARN != c.want.SASLSecretARN || got.TLSCASecretARN != c.want.TLSCASecretARN ||
				got.TLSClientCertSecretARN != c.want.TLSClientCertSecretARN {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestLoadBoundsAreInclusive(t *testing.T) {
	for _, r := range Ranges {
		for _, n := range []int64{r.Min, r.Max} {
			v := strconv.FormatInt(n, 10)
			if r.Unit != 0 {
				v = (time.Duration(n) * r.Unit).String()
			}
			m := base()
			m[r.Variable] = v
			if _, err := Load(getenv(m)); err != nil {
				t.Errorf("%s=%s (a bound of %v): %v", r.Variable, v, r, err)
			}
		}
	}
}

func TestLoadTransactional(t *testing.T) {
	for _, c := range []struct {
		value string
		want  bool
		fails bool
	}{{"", false, false}, {"false", false, false}, {"true", true, false}, {" true ", true, false}, {"yes", false, true}, {"1", false, true}, {"True", false, true}} {
		env := base()
		env["OUTBOX_KAFKA_TRANSACTIONAL"] = c.value
		cfg, err := Load(getenv(env))
		if c.fails {
			if got := variables(t, err); !reflect.DeepEqual(got, []string{"OUTBOX_KAFKA_TRANSACTIONAL"}) || !strings.Contains(err.Error(), "true or false") {
				t.Fatalf("%q: error %v names %v", c.value, err, got)
			}
			continue
		}
		if err != nil || cfg.Transactional != c.want {
			t.Fatalf("%q: Transactional=%v err=%v, want %v", c.value, cfg.Transactional, err, c.want)
		}
	}
}

// The enqueue function needs the tables only; Kafka's variables are not
// required, and a bad OUTBOX_REGION is named.
func TestLoadEnqueue(t *testing.T) {
	env := map[string]string{"OUTBOX_MESSAGES_TABLE": "m", "OUTBOX_CONTROL_TABLE": "c"}
	c, err := LoadEnqueue(func(k string) string { return env[k] })
	if err != nil || c.MessagesTable != "m" || c.ControlTable != "c" || c.Region != defaultRegion {
		t.Fatalf("LoadEnqueue = %+v, %v", c, err)
	}
	env = map[string]string{"OUTBOX_REGION": "EU_WEST"}
	_, err = LoadEnqueue(func(k string) string { return env[k] })
	var names []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *Error
		if errors.As(e, &ce) {
			names = append(names, ce.Variable)
		}
	}
	if strings.Join(names, " ") != "OUTBOX_MESSAGES_TABLE OUTBOX_CONTROL_TABLE OUTBOX_REGION" {
		t.Fatalf("errors name %v", names)
	}
}
