// Package config reads and validates the Lambda functions' configuration from
// environment variables. An invalid value fails the function's init with an
// error naming the variable and what to fix.
package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Auth modes for KAFKA_AUTH.
const (
	AuthNone      = "none"
	AuthTLS       = "tls"
	AuthSCRAM     = "sasl-scram-sha-512"
	AuthMSKIAM    = "msk-iam"
	defaultRegion = "us-east-1"
)

// Config is the functions' configuration.
type Config struct {
	MessagesTable   string        // OUTBOX_MESSAGES_TABLE (required)
	ControlTable    string        // OUTBOX_CONTROL_TABLE (required)
	BucketCount     int           // OUTBOX_BUCKET_COUNT (0 = take the table's)
	BatchSize       int           // OUTBOX_BATCH_SIZE (500)
	Topics          []string      // OUTBOX_TOPICS (checked at init)
	LeaseDuration   time.Duration // OUTBOX_LEASE_DURATION (30s)
	GapTimeout      time.Duration // OUTBOX_GAP_TIMEOUT (10s)
	MaxMessageBytes int           // OUTBOX_MAX_MESSAGE_BYTES (1048576)
	Concurrency     int           // OUTBOX_CONCURRENCY (8)
	Brokers         []string      // KAFKA_BOOTSTRAP_SERVERS (required)
	Auth            string        // KAFKA_AUTH (none)
	SASLSecretARN   string        // KAFKA_SASL_SECRET_ARN (required for sasl-scram-sha-512)
	Region          string        // AWS_REGION (set by Lambda)
	DynamoEndpoint  string        // OUTBOX_DYNAMODB_ENDPOINT (optional: LocalStack, DynamoDB Local)
}

// Error names the variable that is wrong.
type Error struct {
	Variable string
	Value    string
	Reason   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("configuration: %s=%q: %s", e.Variable, e.Value, e.Reason)
}

// Load reads the configuration through getenv (os.Getenv in the functions).
func Load(getenv func(string) string) (Config, error) {
	c := Config{
		MessagesTable:  getenv("OUTBOX_MESSAGES_TABLE"),
		ControlTable:   getenv("OUTBOX_CONTROL_TABLE"),
		Auth:           AuthNone,
		SASLSecretARN:  getenv("KAFKA_SASL_SECRET_ARN"),
		Region:         getenv("AWS_REGION"),
		DynamoEndpoint: getenv("OUTBOX_DYNAMODB_ENDPOINT"),
	}
	if c.Region == "" {
		c.Region = defaultRegion
	}
	if c.MessagesTable == "" {
		return c, &Error{"OUTBOX_MESSAGES_TABLE", "", "required: the name of the outbox messages table"}
	}
	if c.ControlTable == "" {
		return c, &Error{"OUTBOX_CONTROL_TABLE", "", "required: the name of the outbox control table"}
	}
	var err error
	intVar := func(name string, def, lo, hi int) int {
		v := getenv(name)
		if v == "" || err != nil {
			return def
		}
		n, perr := strconv.Atoi(v)
		if perr != nil || n < lo || n > hi {
			err = &Error{name, v, fmt.Sprintf("must be an integer in %d..%d", lo, hi)}
		}
		return n
	}
	durVar := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" || err != nil {
			return def
		}
		d, perr := time.ParseDuration(v)
		if perr != nil || d <= 0 {
			err = &Error{name, v, "must be a positive Go duration such as 30s or 2m"}
		}
		return d
	}
	c.BucketCount = intVar("OUTBOX_BUCKET_COUNT", 0, 1, 4096)
	c.BatchSize = intVar("OUTBOX_BATCH_SIZE", 500, 1, 10000)
	c.MaxMessageBytes = intVar("OUTBOX_MAX_MESSAGE_BYTES", 1<<20, 1024, 1<<30)
	c.Concurrency = intVar("OUTBOX_CONCURRENCY", 8, 1, 256)
	c.LeaseDuration = durVar("OUTBOX_LEASE_DURATION", 30*time.Second)
	c.GapTimeout = durVar("OUTBOX_GAP_TIMEOUT", 10*time.Second)
	if err != nil {
		return c, err
	}
	if c.LeaseDuration < 10*time.Second {
		return c, &Error{"OUTBOX_LEASE_DURATION", c.LeaseDuration.String(), "must be at least 10s (renewal every third of it, 5s margin)"}
	}
	c.Topics = list(getenv("OUTBOX_TOPICS"))
	c.Brokers = list(getenv("KAFKA_BOOTSTRAP_SERVERS"))
	if len(c.Brokers) == 0 {
		return c, &Error{"KAFKA_BOOTSTRAP_SERVERS", "", "required: comma-separated host:port list"}
	}
	for _, b := range c.Brokers {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			return c, &Error{"KAFKA_BOOTSTRAP_SERVERS", getenv("KAFKA_BOOTSTRAP_SERVERS"), fmt.Sprintf("%q is not host:port", b)}
		}
	}
	if v := getenv("KAFKA_AUTH"); v != "" {
		c.Auth = v
	}
	switch c.Auth {
	case AuthNone, AuthTLS, AuthMSKIAM:
	case AuthSCRAM:
		if c.SASLSecretARN == "" {
			return c, &Error{"KAFKA_SASL_SECRET_ARN", "", "required when KAFKA_AUTH=sasl-scram-sha-512: a Secrets Manager secret with username and password"}
		}
	default:
		return c, &Error{"KAFKA_AUTH", c.Auth, "must be one of none, tls, sasl-scram-sha-512, msk-iam"}
	}
	return c, nil
}

// RenewInterval is a third of the lease, as the defaults are.
func (c Config) RenewInterval() time.Duration { return c.LeaseDuration / 3 }

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
