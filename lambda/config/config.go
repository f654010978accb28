// Package config reads and validates the Lambda functions' configuration from
// environment variables. Every invalid variable is reported at once, each as
// an *Error naming the variable and what to fix, so a function with a wrong
// configuration fails its init once, visibly, with the whole list.
//
// The outbox's shared settings — BucketCount, the mode, MaxMessageBytes and
// the stamped header names — are not variables: every function reads them
// from the outbox's config item, which the stack's setup writes from its
// parameters (docs/design.md §12).
package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
)

// Auth modes for KAFKA_AUTH.
const (
	AuthNone      = "none"               // plaintext
	AuthTLS       = "tls"                // TLS, server certificate checked
	AuthMTLS      = "mtls"               // TLS with a client certificate (KAFKA_TLS_CLIENT_CERT_SECRET_ARN)
	AuthSCRAM256  = "sasl-scram-sha-256" // SASL/SCRAM-SHA-256 over TLS (KAFKA_SASL_SECRET_ARN)
	AuthSCRAM512  = "sasl-scram-sha-512" // SASL/SCRAM-SHA-512 over TLS (KAFKA_SASL_SECRET_ARN)
	AuthMSKIAM    = "msk-iam"            // SASL AWS_MSK_IAM over TLS, signed with the function's role
	defaultRegion = "us-east-1"
)

// AuthModes lists every KAFKA_AUTH value, in the order the docs give them.
var AuthModes = []string{AuthNone, AuthTLS, AuthMTLS, AuthSCRAM256, AuthSCRAM512, AuthMSKIAM}

// Config is the functions' configuration.
type Config struct {
	MessagesTable string        // OUTBOX_MESSAGES_TABLE (required)
	ControlTable  string        // OUTBOX_CONTROL_TABLE (required)
	BatchSize     int           // OUTBOX_BATCH_SIZE (500)
	Topics        []string      // OUTBOX_TOPICS (checked at init; none = only check that a broker answers)
	LeaseDuration time.Duration // OUTBOX_LEASE_DURATION (30s)
	GapTimeout    time.Duration // OUTBOX_GAP_TIMEOUT (10s)
	Concurrency   int           // OUTBOX_CONCURRENCY (0: every bucket of a batch or sweep at once)
	// SweepMinAge is OUTBOX_SWEEP_MIN_AGE (10s): the sweeper leaves
	// messages younger than this to the stream path.
	SweepMinAge time.Duration
	// ParkStuckAfter is OUTBOX_PARK_STUCK_AFTER (0, off): park a message
	// that has stopped its bucket this long with a permanent topic- or
	// cluster-wide error (relay.ParkStuckAfter).
	ParkStuckAfter time.Duration
	// OutboxRegion is OUTBOX_REGION: this function's region in an outbox
	// in region mode (a DynamoDB global table; the config item lists the
	// regions and relay.New and NewWriter check it against them); empty
	// for the default single-region mode.
	OutboxRegion  string
	Brokers       []string // KAFKA_BOOTSTRAP_SERVERS (required)
	Auth          string   // KAFKA_AUTH (required: one of AuthModes)
	SASLSecretARN string   // KAFKA_SASL_SECRET_ARN (required for the sasl-scram-* modes, refused otherwise)
	// TLSCASecretARN is KAFKA_TLS_CA_SECRET_ARN: a secret holding the PEM
	// bundle of the certificate authorities that sign the brokers'
	// certificates, trusted instead of the system roots. Optional; any mode
	// but none.
	TLSCASecretARN string
	// TLSClientCertSecretARN is KAFKA_TLS_CLIENT_CERT_SECRET_ARN: a secret
	// holding the client certificate chain and its private key. Required for
	// mtls, refused otherwise.
	TLSClientCertSecretARN string
	// Transactional is OUTBOX_KAFKA_TRANSACTIONAL (false): publish each
	// drained batch as one Kafka transaction under the bucket's own
	// transactional id (kafka.TxnPublisher), so that a new holder of a
	// bucket fences the previous one at the broker.
	Transactional  bool
	Region         string // AWS_REGION (set by Lambda)
	DynamoEndpoint string // OUTBOX_DYNAMODB_ENDPOINT (optional: LocalStack, DynamoDB Local)
}

// Range is the accepted range of a numeric variable. Durations are in
// seconds (Unit time.Second); template.yaml's parameters use the same
// bounds (deploy/template_test.go checks it).
type Range struct {
	Variable string
	Min, Max int64
	Unit     time.Duration // 0 for plain integers
}

func (r Range) String() string {
	if r.Unit == 0 {
		return fmt.Sprintf("%d..%d", r.Min, r.Max)
	}
	return fmt.Sprintf("%v..%v", time.Duration(r.Min)*r.Unit, time.Duration(r.Max)*r.Unit)
}

// Ranges of the numeric variables.
//
// The lease is at least MinLeaseSeconds (12 s), at most 15 min, the longest
// a Lambda invocation runs (a longer lease only delays takeover after a
// crash).
// The gap timeout is at least 1 s because a writer's reservation and commit
// take tens of milliseconds and a shorter wait fences live writers; at most
// 1 h, beyond which a stuck writer holds its bucket for no benefit (the
// DynamoDB token window is 10 min).
var Ranges = []Range{
	{Variable: "OUTBOX_BATCH_SIZE", Min: 1, Max: 10000},
	{Variable: "OUTBOX_CONCURRENCY", Min: 0, Max: 256},
	{Variable: "OUTBOX_LEASE_DURATION", Min: MinLeaseSeconds, Max: 900, Unit: time.Second},
	{Variable: "OUTBOX_GAP_TIMEOUT", Min: 1, Max: 3600, Unit: time.Second},
	{Variable: "OUTBOX_SWEEP_MIN_AGE", Min: 0, Max: 600, Unit: time.Second},
	{Variable: "OUTBOX_PARK_STUCK_AFTER", Min: 0, Max: 604800, Unit: time.Second},
}

func rangeOf(variable string) Range {
	for _, r := range Ranges {
		if r.Variable == variable {
			return r
		}
	}
	panic("config: no range for " + variable)
}

// Error names the variable that is wrong. Load returns one per invalid
// variable, joined with errors.Join; errors.As finds the first.
type Error struct {
	Variable string
	Value    string
	Reason   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("configuration: %s=%q: %s", e.Variable, e.Value, e.Reason)
}

// Load reads the configuration through getenv (os.Getenv in the functions).
// On error the Config holds what could be read, and the error joins one
// *Error per invalid variable.
func Load(getenv func(string) string) (Config, error) {
	l := loader{getenv: getenv}
	c := Config{
		MessagesTable:          l.required("OUTBOX_MESSAGES_TABLE", "the name of the outbox messages table"),
		ControlTable:           l.required("OUTBOX_CONTROL_TABLE", "the name of the outbox control table"),
		BatchSize:              l.int("OUTBOX_BATCH_SIZE", 500),
		Concurrency:            l.int("OUTBOX_CONCURRENCY", 0),
		LeaseDuration:          l.duration("OUTBOX_LEASE_DURATION", 30*time.Second),
		GapTimeout:             l.duration("OUTBOX_GAP_TIMEOUT", 10*time.Second),
		SweepMinAge:            l.duration("OUTBOX_SWEEP_MIN_AGE", 10*time.Second),
		ParkStuckAfter:         l.duration("OUTBOX_PARK_STUCK_AFTER", 0),
		OutboxRegion:           l.region("OUTBOX_REGION"),
		Topics:                 l.topics("OUTBOX_TOPICS"),
		Brokers:                l.brokers("KAFKA_BOOTSTRAP_SERVERS"),
		Auth:                   l.required("KAFKA_AUTH", "one of "+strings.Join(AuthModes, ", ")+" (see docs/deploy.md)"),
		SASLSecretARN:          getenv("KAFKA_SASL_SECRET_ARN"),
		TLSCASecretARN:         getenv("KAFKA_TLS_CA_SECRET_ARN"),
		TLSClientCertSecretARN: getenv("KAFKA_TLS_CLIENT_CERT_SECRET_ARN"),
		Transactional:          l.bool("OUTBOX_KAFKA_TRANSACTIONAL"),
		Region:                 getenv("AWS_REGION"),
		DynamoEndpoint:         l.endpoint("OUTBOX_DYNAMODB_ENDPOINT"),
	}
	if c.Region == "" {
		c.Region = defaultRegion
	}
	if c.Auth != "" {
		l.auth(c)
	}
	return c, errors.Join(l.errs...)
}

// ResumeWindow is the engine's default (relay.DefaultResumeWindow, 500ms):
// the functions do not change it.
func (c Config) ResumeWindow() time.Duration { return relay.DefaultResumeWindow }

// MinLeaseSeconds is the shortest OUTBOX_LEASE_DURATION. The lease must last
// at least ResumeWindow + MaxClockSkew (a takeover at expiry owes no
// ResumeWindow wait: docs/design.md §4.1), which any lease of a second does;
// below 12 s the renewals (every third of it) and the publish cut-off
// (LeaseMargin + MaxClockSkew, a third of it) leave a loaded container's
// pauses too little room, and a live holder's lease is taken over.
const MinLeaseSeconds = 12

// RenewInterval is a third of the lease, as the defaults are.
func (c Config) RenewInterval() time.Duration { return c.LeaseDuration / 3 }

// LeaseMargin and MaxClockSkew are the engine's defaults (5s each) for the
// default 30s lease, a sixth of a shorter one: renewal (a third), margin
// and skew must fit in the lease.
func (c Config) LeaseMargin() time.Duration { return min(5*time.Second, c.LeaseDuration/6) }

// MaxClockSkew: see LeaseMargin.
func (c Config) MaxClockSkew() time.Duration { return min(5*time.Second, c.LeaseDuration/6) }

// region reads an optional region id (outbox.ValidateRegionID).
func (l *loader) region(name string) string {
	v := strings.TrimSpace(l.getenv(name))
	if v != "" {
		if err := outbox.ValidateRegionID(v); err != nil {
			l.fail(name, v, err.Error()+" (this function's region in the outbox's region list, or unset for the single-region mode)")
		}
	}
	return v
}

// endpoint reads an optional endpoint URL (http or https, a host, nothing
// after the path): a typo would otherwise surface only as the SDK's failure
// to resolve it, on the first call.
func (l *loader) endpoint(name string) string {
	v := strings.TrimSpace(l.getenv(name))
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		l.fail(name, v, "must be an http:// or https:// URL such as http://localhost:8000 (DynamoDB Local, LocalStack), or unset for the region's DynamoDB endpoint")
	}
	return v
}

type loader struct {
	getenv func(string) string
	errs   []error
}

func (l *loader) fail(variable, value, reason string) {
	l.errs = append(l.errs, &Error{Variable: variable, Value: value, Reason: reason})
}

func (l *loader) required(name, what string) string {
	v := strings.TrimSpace(l.getenv(name))
	if v == "" {
		l.fail(name, "", "required: "+what)
	}
	return v
}

func (l *loader) int(name string, def int) int {
	v := l.getenv(name)
	if v == "" {
		return def
	}
	r := rangeOf(name)
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < r.Min || n > r.Max {
		l.fail(name, v, "must be an integer in "+r.String())
		return def
	}
	return int(n)
}

func (l *loader) duration(name string, def time.Duration) time.Duration {
	v := l.getenv(name)
	if v == "" {
		return def
	}
	r := rangeOf(name)
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < time.Duration(r.Min)*r.Unit || d > time.Duration(r.Max)*r.Unit {
		l.fail(name, v, "must be a Go duration (such as 30s or 2m) in "+r.String())
		return def
	}
	return d
}

// bool reads a flag: true or false, unset is false. Anything else (yes, 1,
// a typo) is refused rather than read as off.
func (l *loader) bool(name string) bool {
	v := strings.TrimSpace(l.getenv(name))
	switch v {
	case "", "false":
		return false
	case "true":
		return true
	}
	l.fail(name, v, "must be true or false (unset is false)")
	return false
}

func (l *loader) topics(name string) []string {
	raw := l.getenv(name)
	out := list(raw)
	for _, t := range out {
		if err := outbox.ValidateTopic(t); err != nil {
			l.fail(name, raw, fmt.Sprintf("topic %q: %v", t, err))
		}
	}
	return out
}

func (l *loader) brokers(name string) []string {
	raw := l.getenv(name)
	out := list(raw)
	if len(out) == 0 {
		l.fail(name, raw, "required: comma-separated host:port list")
	}
	for _, b := range out {
		i := strings.LastIndexByte(b, ':')
		if i <= 0 {
			l.fail(name, raw, fmt.Sprintf("%q is not host:port", b))
			continue
		}
		if p, err := strconv.Atoi(b[i+1:]); err != nil || p < 1 || p > 65535 {
			l.fail(name, raw, fmt.Sprintf("%q: the port must be a number in 1..65535", b))
		}
	}
	return out
}

// auth checks that the secrets given are exactly those the mode uses: a
// secret that is set but ignored is as likely a mistake as a missing one.
func (l *loader) auth(c Config) {
	scram := c.Auth == AuthSCRAM256 || c.Auth == AuthSCRAM512
	known := false
	for _, m := range AuthModes {
		known = known || c.Auth == m
	}
	if !known {
		l.fail("KAFKA_AUTH", c.Auth, "must be one of "+strings.Join(AuthModes, ", "))
		return
	}
	switch {
	case scram && c.SASLSecretARN == "":
		l.fail("KAFKA_SASL_SECRET_ARN", "", "required when KAFKA_AUTH="+c.Auth+`: a Secrets Manager secret {"username": ..., "password": ...}`)
	case !scram && c.SASLSecretARN != "":
		l.fail("KAFKA_SASL_SECRET_ARN", c.SASLSecretARN, "set, but KAFKA_AUTH="+c.Auth+" does not use it: unset it, or use sasl-scram-sha-256 or sasl-scram-sha-512")
	}
	switch {
	case c.Auth == AuthMTLS && c.TLSClientCertSecretARN == "":
		l.fail("KAFKA_TLS_CLIENT_CERT_SECRET_ARN", "", `required when KAFKA_AUTH=mtls: a Secrets Manager secret {"certificate": PEM chain, "privateKey": PEM}`)
	case c.Auth != AuthMTLS && c.TLSClientCertSecretARN != "":
		l.fail("KAFKA_TLS_CLIENT_CERT_SECRET_ARN", c.TLSClientCertSecretARN, "set, but KAFKA_AUTH="+c.Auth+" does not use it: unset it, or use mtls")
	}
	if c.Auth == AuthNone && c.TLSCASecretARN != "" {
		l.fail("KAFKA_TLS_CA_SECRET_ARN", c.TLSCASecretARN, "set, but KAFKA_AUTH=none does not use TLS: unset it, or choose a TLS mode")
	}
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// EnqueueConfig is the enqueue function's configuration: it writes to the
// outbox and needs no Kafka settings.
type EnqueueConfig struct {
	MessagesTable  string // OUTBOX_MESSAGES_TABLE (required)
	ControlTable   string // OUTBOX_CONTROL_TABLE (required)
	Region         string // AWS_REGION (set by Lambda)
	DynamoEndpoint string // OUTBOX_DYNAMODB_ENDPOINT (optional)
	OutboxRegion   string // OUTBOX_REGION (region mode: this function's region; see Config)
}

// LoadEnqueue reads the enqueue function's configuration, as Load does.
func LoadEnqueue(getenv func(string) string) (EnqueueConfig, error) {
	l := loader{getenv: getenv}
	c := EnqueueConfig{
		MessagesTable:  l.required("OUTBOX_MESSAGES_TABLE", "the name of the outbox messages table"),
		ControlTable:   l.required("OUTBOX_CONTROL_TABLE", "the name of the outbox control table"),
		Region:         getenv("AWS_REGION"),
		DynamoEndpoint: getenv("OUTBOX_DYNAMODB_ENDPOINT"),
		OutboxRegion:   l.region("OUTBOX_REGION"),
	}
	if c.Region == "" {
		c.Region = defaultRegion
	}
	return c, errors.Join(l.errs...)
}
