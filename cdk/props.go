package outboxcdk

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// regionsPattern is the template's Regions AllowedPattern.
var regionsPattern = regexp.MustCompile(`^$|^[a-z0-9-]{1,32}(,[a-z0-9-]{1,32}){0,5}$`)

// tableNamePattern is the template's MessagesTableName and ControlTableName
// AllowedPattern.
var tableNamePattern = regexp.MustCompile(`^$|^[a-zA-Z0-9_.-]{3,255}$`)

// The Tables values.
const (
	TablesCreate = "create"
	TablesGlobal = "global"
	TablesAttach = "attach"
)

// Props configures an outbox. Each field mirrors the template.yaml parameter
// of the same name, with the same default and the same bounds; nil means the
// default. Numbers are *float64 and lists *[]*string, as everywhere in the Go
// CDK (jsii.Number, jsii.String, jsii.Strings). Validate checks them all
// before New creates anything.
//
// String fields may be CDK tokens (a secret's ARN, a subnet's id): a token is
// passed through unchecked and CloudFormation checks the value at deploy
// time. Numbers and KafkaAuthMode / Architecture must be plain values,
// because they decide what New creates.
type Props struct {
	// KafkaBootstrapServers is the comma-separated host:port list of Kafka
	// brokers (KAFKA_BOOTSTRAP_SERVERS). Required.
	KafkaBootstrapServers *string
	// KafkaAuthMode is how the functions authenticate to Kafka (KAFKA_AUTH):
	// none (plaintext), tls (TLS, server certificate checked), mtls (TLS
	// with the client certificate in KafkaTlsClientCertSecretArn),
	// sasl-scram-sha-256 or sasl-scram-sha-512 (SCRAM over TLS with
	// KafkaSaslSecretArn) or msk-iam (AWS_MSK_IAM over TLS, signed with the
	// function's role). Required.
	KafkaAuthMode *string
	// KafkaSaslSecretArn is a Secrets Manager secret {"username","password"}
	// (KAFKA_SASL_SECRET_ARN): required for the sasl-scram modes, refused
	// otherwise. Default: none.
	KafkaSaslSecretArn *string
	// KafkaTlsCaSecretArn is a Secrets Manager secret holding the PEM bundle
	// of the CAs that sign the brokers' certificates
	// (KAFKA_TLS_CA_SECRET_ARN), trusted instead of the system roots; any
	// mode but none. Default: the system roots.
	KafkaTlsCaSecretArn *string
	// KafkaTlsClientCertSecretArn is a Secrets Manager secret
	// {"certificate","privateKey"} (KAFKA_TLS_CLIENT_CERT_SECRET_ARN):
	// required for mtls, refused otherwise. Default: none.
	KafkaTlsClientCertSecretArn *string
	// KafkaSecretsKmsKeyArn is the customer managed KMS key that encrypts the
	// Kafka secrets above (MSK requires one for SCRAM secrets). Default: the
	// AWS managed key.
	KafkaSecretsKmsKeyArn *string
	// MskClusterArn scopes the msk-iam permissions to one cluster and its
	// topics; ignored by the other modes. Default: any MSK cluster in the
	// stack's account and region.
	MskClusterArn *string
	// KafkaTransactional "true" publishes each drained batch as one Kafka
	// transaction under a transactional id per bucket (<messages
	// table>-bucket-<n>), so a new holder fences a stale one at the broker
	// (OUTBOX_KAFKA_TRANSACTIONAL); consumers must read read_committed. With
	// msk-iam the roles get DescribeTransactionalId and AlterTransactionalId
	// on those ids instead of WriteDataIdempotently. Default "false".
	KafkaTransactional *string
	// VpcSubnetIds and VpcSecurityGroupIds put the relay and the sweeper in
	// a VPC; give both or neither. Default: no VPC. In a VPC the functions
	// need a DynamoDB gateway endpoint, a route to the brokers and, for
	// Kafka secrets, a Secrets Manager interface endpoint or a NAT.
	VpcSubnetIds        *[]*string
	VpcSecurityGroupIds *[]*string
	// BucketCount is the outbox's bucket count, which the stack writes to
	// its config item, where writers and relays read it; a change happens online while
	// writers and relays run (writers switch at once; the relays hold each
	// key's new messages until its old bucket drained; a change aborted
	// before its flip rolls the update back: docs/deploy.md). Default 8,
	// 1..4096.
	BucketCount *float64
	// OutboxMode is the outbox's mode, which the stack writes to its config
	// item, where writers and relays read it: delete (each published message is replaced by a
	// tombstone) or watermark (the relay writes nothing per message;
	// messages stay until OutboxRetentionHours and can be replayed by
	// range). A change is refused (the update rolls back) unless the outbox
	// is empty. Default delete.
	OutboxMode *string
	// OutboxRetentionHours is, in watermark mode, how long every message is
	// kept (its TTL) after it is written; ignored in delete mode. A message
	// still pending when its TTL passes can be deleted unpublished: keep it
	// far above any backlog, and OldestPendingAgeAlarmSeconds far below it.
	// Default 24, 1..8760.
	OutboxRetentionHours *float64
	// StreamBatchSize is the number of stream records (bucket hints) per
	// relay invocation. Default 1000, 1..10000.
	StreamBatchSize *float64
	// StreamBatchingWindowSeconds is how long the event source gathers hints
	// before it invokes the relay. Default 0 (at once), 0..300.
	StreamBatchingWindowSeconds *float64
	// OutboxBatchSize is OUTBOX_BATCH_SIZE, messages per round trip.
	// Default 500, 1..10000.
	OutboxBatchSize *float64
	// Topics is OUTBOX_TOPICS, comma-separated topics the outbox serves:
	// written to its config item (writers refuse any other topic) and
	// checked by the functions at init; with msk-iam, the only topics the
	// functions may write. Default: none, meaning any topic (a misspelt
	// topic then stops its bucket at the relay; with msk-iam, every topic
	// of the cluster) and only a check that a broker answers.
	Topics *string
	// Regions puts the outbox in region mode, for tables made DynamoDB
	// global tables: the regions in order, comma-separated, the same in
	// every region's stack (the template's Regions parameter). Written to
	// the config item; the functions get OUTBOX_REGION, the stack's region.
	// BucketCount must be a multiple of their number. Default: none, single
	// region (replicas are refused). See docs/deploy.md, Region mode.
	Regions *string
	// Tables is where the tables come from: TablesCreate (the default)
	// creates both tables in the stack's region; TablesGlobal (region
	// mode's first stack) creates them as DynamoDB global tables with a
	// replica in every region of Regions (up to 6; the stack's region must
	// be one of them) and writes the config item; TablesAttach (region
	// mode's stack in every other region) creates no tables and runs on this
	// region's replicas of MessagesTableName and ControlTableName, finding
	// the replica's stream itself and only checking the config item. See
	// docs/deploy.md, Region mode.
	Tables *string
	// MessagesTableName and ControlTableName are the tables of
	// TablesAttach (the TablesGlobal stack's MessagesTableName and
	// ControlTableName outputs); required there, refused otherwise.
	MessagesTableName *string
	ControlTableName  *string
	// LeaseDurationSeconds is OUTBOX_LEASE_DURATION. Default 30, 12..900
	// (renewals every third of it, and the publish cut-off a third before
	// it ends, need that room on a loaded container); keep it well below
	// RelayTimeout.
	LeaseDurationSeconds *float64
	// GapTimeoutSeconds is OUTBOX_GAP_TIMEOUT. Default 10, 1..3600.
	GapTimeoutSeconds *float64
	// SweepMinAgeSeconds is OUTBOX_SWEEP_MIN_AGE: the sweeper leaves
	// messages younger than this to the stream-triggered relay. Default 10,
	// 0..600.
	SweepMinAgeSeconds *float64
	// ParkStuckAfterSeconds is OUTBOX_PARK_STUCK_AFTER: park a message that
	// has stopped its bucket this long with a permanent topic- or
	// cluster-wide error, so the rest flows. Default 0 (off), 0..604800.
	ParkStuckAfterSeconds *float64
	// MaxMessageBytes is the outbox's MaxMessageBytes, which the stack
	// writes to its config item, where writers, relays and publishers read
	// it; match the topics' max.message.bytes. Default 1048576,
	// 1024..104857596.
	MaxMessageBytes *float64
	// RelayConcurrency is OUTBOX_CONCURRENCY, buckets one invocation drains
	// at once. Default 0 (every bucket of a batch at once), 0..256.
	RelayConcurrency *float64
	// RelayTimeout is the relay's timeout in seconds. Default 120, 30..900.
	RelayTimeout *float64
	// SweeperTimeout is the sweeper's timeout in seconds, below its
	// one-minute schedule so that sweeps never overlap. Default 50, 15..55.
	SweeperTimeout *float64
	// FunctionMemorySize is the relay's and the sweeper's memory in MB.
	// Default 512, 128..10240.
	FunctionMemorySize *float64
	// RelayReservedConcurrency reserves concurrent executions for the relay
	// (and limits it to them). Default -1 (none); -1..10000, 0 refused (it
	// would stop the relay).
	RelayReservedConcurrency *float64
	// SweeperReservedConcurrency 1 reserves one concurrent execution for the
	// sweeper. Default -1 (none); -1 or 1.
	SweeperReservedConcurrency *float64
	// Architecture is arm64 or x86_64, the bootstraps' instruction set.
	// Default arm64.
	Architecture *string
	// LogLevel is the functions' application log level (JSON logs; Lambda
	// passes it as AWS_LAMBDA_LOG_LEVEL): TRACE, DEBUG, INFO, WARN, ERROR or
	// FATAL. Default INFO.
	LogLevel *string
	// LogRetentionInDays is the log groups' retention. Default 30; one of
	// the values CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, ..., 3653).
	LogRetentionInDays *float64
	// AlarmTopicArn is the SNS topic the alarms notify (alarm and OK).
	// Default: none (alarms without actions; add your own with
	// Alarms.All()[i].AddAlarmAction).
	AlarmTopicArn *string
	// IteratorAgeAlarmMilliseconds is the relay stream IteratorAge above
	// which the iterator-age alarm fires. Default 60000, at least 1000.
	IteratorAgeAlarmMilliseconds *float64
	// OldestPendingAgeAlarmSeconds is the age of the oldest pending message
	// above which the oldest-pending-age alarm fires. Default 300, at least
	// 60.
	OldestPendingAgeAlarmSeconds *float64
	// EnableEnqueueFunction "true" deploys the enqueue function
	// (lambda/enqueue), which any AWS service invokes to commit its DynamoDB
	// items and outbox messages in one transaction, with EnqueueInvokePolicy
	// to invoke it. Default "false".
	EnableEnqueueFunction *string
	// EnqueueBusinessTableArns are the tables the enqueue function's
	// callers write in the same transaction (PutItem, UpdateItem,
	// DeleteItem, ConditionCheckItem on these only). Default: none
	// (outbox messages only).
	EnqueueBusinessTableArns *[]*string
	// EnqueueReservedConcurrency is the enqueue function's reserved
	// concurrency, and its limit, so that a burst of its callers (an SQS
	// backlog, an EventBridge fan-out) cannot take the account's
	// concurrency from the relay and the sweeper; keep an SQS event
	// source's MaximumConcurrency at or below it. Default 10, 2..10000, or
	// -1 for none: Lambda keeps 100 of the account's concurrency
	// unreserved, so a reservation needs an account limit of at least 100 +
	// this + the other reservations (new accounts may have 10).
	EnqueueReservedConcurrency *float64

	// BinDir is where the function binaries are, laid out as `make build`
	// writes them: <BinDir>/<function>/<goarch>/bootstrap for relay,
	// sweeper, setup and (when enabled) enqueue, goarch arm64 or amd64. Relative paths are relative
	// to the working directory of the CDK app. Default "bin". Not a template
	// parameter: SAM builds the functions from source instead.
	BinDir *string
}

// Auth modes, as KAFKA_AUTH spells them.
const (
	AuthNone         = "none"
	AuthTLS          = "tls"
	AuthMTLS         = "mtls"
	AuthSASLSCRAM256 = "sasl-scram-sha-256"
	AuthSASLSCRAM512 = "sasl-scram-sha-512"
	AuthMSKIAM       = "msk-iam"
)

// Modes, as the OutboxMode parameter spells them.
const (
	ModeDelete    = "delete"
	ModeWatermark = "watermark"
)

// Architectures.
const (
	ArchARM64  = "arm64"
	ArchX86_64 = "x86_64"
)

const (
	defaultBinDir  = "bin"
	bootstrapName  = "bootstrap"
	tokenMarker    = "${Token["
	listTokenMark  = "#{Token["
	numberTokenMin = 1e289 // CDK encodes number tokens as floats of about -1.9e289
)

var (
	authModes = []string{AuthNone, AuthTLS, AuthMTLS, AuthSASLSCRAM256, AuthSASLSCRAM512, AuthMSKIAM}
	modes     = []string{ModeDelete, ModeWatermark}
	logLevels = []string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}
)

// functions are the Lambda functions New always deploys, by their folder
// under lambda/ and BinDir; optionalFunctions those it deploys when their
// Props enable them.
var (
	functions         = []string{"relay", "sweeper", "setup"}
	optionalFunctions = []string{"enqueue"}
)

// PropError is a Props field that Validate refused: which field, the value
// given, and what would be accepted.
type PropError struct {
	Field string // the Props field (and template parameter) name
	Value string // the value given, as text
	Want  string // what is accepted, and why
}

func (e *PropError) Error() string {
	return fmt.Sprintf("outboxcdk: Props.%s = %s: %s", e.Field, e.Value, e.Want)
}

// intRange is one numeric field's default and bounds; max 0 = no maximum.
type intRange struct {
	name     string
	field    func(*Props) **float64
	def      int
	min, max int
	allowed  []int // when set, the only accepted values
	what     string
}

var numbers = []intRange{
	{name: "BucketCount", field: func(p *Props) **float64 { return &p.BucketCount }, def: 8, min: 1, max: 4096, what: "the outbox's bucket count"},
	{name: "OutboxRetentionHours", field: func(p *Props) **float64 { return &p.OutboxRetentionHours }, def: 24, min: 1, max: 8760,
		what: "hours a watermark-mode message is kept; at least 1, far above any backlog"},
	{name: "StreamBatchSize", field: func(p *Props) **float64 { return &p.StreamBatchSize }, def: 1000, min: 1, max: 10000, what: "the stream event source allows at most 10000 records per batch"},
	{name: "StreamBatchingWindowSeconds", field: func(p *Props) **float64 { return &p.StreamBatchingWindowSeconds }, def: 0, min: 0, max: 300, what: "the event source's MaximumBatchingWindowInSeconds"},
	{name: "OutboxBatchSize", field: func(p *Props) **float64 { return &p.OutboxBatchSize }, def: 500, min: 1, max: 10000, what: "OUTBOX_BATCH_SIZE"},
	{name: "LeaseDurationSeconds", field: func(p *Props) **float64 { return &p.LeaseDurationSeconds }, def: 30, min: 12, max: 900, what: "OUTBOX_LEASE_DURATION in seconds, at least 12"},
	{name: "GapTimeoutSeconds", field: func(p *Props) **float64 { return &p.GapTimeoutSeconds }, def: 10, min: 1, max: 3600, what: "OUTBOX_GAP_TIMEOUT in seconds"},
	{name: "SweepMinAgeSeconds", field: func(p *Props) **float64 { return &p.SweepMinAgeSeconds }, def: 10, min: 0, max: 600, what: "OUTBOX_SWEEP_MIN_AGE in seconds"},
	{name: "ParkStuckAfterSeconds", field: func(p *Props) **float64 { return &p.ParkStuckAfterSeconds }, def: 0, min: 0, max: 604800, what: "OUTBOX_PARK_STUCK_AFTER in seconds; 0 = off"},
	{name: "MaxMessageBytes", field: func(p *Props) **float64 { return &p.MaxMessageBytes }, def: 1048576, min: 1024, max: 104857596, what: "the largest record, in bytes"},
	{name: "RelayConcurrency", field: func(p *Props) **float64 { return &p.RelayConcurrency }, def: 0, min: 0, max: 256, what: "OUTBOX_CONCURRENCY"},
	{name: "RelayTimeout", field: func(p *Props) **float64 { return &p.RelayTimeout }, def: 120, min: 30, max: 900, what: "seconds"},
	{name: "SweeperTimeout", field: func(p *Props) **float64 { return &p.SweeperTimeout }, def: 50, min: 15, max: 55, what: "seconds, below the one-minute schedule"},
	{name: "FunctionMemorySize", field: func(p *Props) **float64 { return &p.FunctionMemorySize }, def: 512, min: 128, max: 10240, what: "MB"},
	{name: "RelayReservedConcurrency", field: func(p *Props) **float64 { return &p.RelayReservedConcurrency }, def: -1, min: -1, max: 10000, what: "-1 = none; 0 would stop the relay and is refused"},
	{name: "SweeperReservedConcurrency", field: func(p *Props) **float64 { return &p.SweeperReservedConcurrency }, def: -1, allowed: []int{-1, 1}, what: "-1 = none"},
	{name: "EnqueueReservedConcurrency", field: func(p *Props) **float64 { return &p.EnqueueReservedConcurrency }, def: 10, min: -1, max: 10000,
		what: "the enqueue function's reserved concurrency and limit; -1 = none; 0 and 1 are refused"},
	{name: "LogRetentionInDays", field: func(p *Props) **float64 { return &p.LogRetentionInDays }, def: 30,
		allowed: []int{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}, what: "a retention CloudWatch Logs accepts"},
	{name: "IteratorAgeAlarmMilliseconds", field: func(p *Props) **float64 { return &p.IteratorAgeAlarmMilliseconds }, def: 60000, min: 1000, what: "milliseconds"},
	{name: "OldestPendingAgeAlarmSeconds", field: func(p *Props) **float64 { return &p.OldestPendingAgeAlarmSeconds }, def: 300, min: 60, what: "seconds"},
}

// config is Props after Validate: defaults filled in, numbers as ints.
type config struct {
	props                            Props
	bootstrap, auth, arch, level     string
	mode                             string
	saslSecret, caSecret, certSecret string // the secrets the mode uses ("" = none)
	kmsKey, msk                      string // "" = none, or not used by the mode
	subnets, securityGroups          []string
	topics, alarmTopic, binDir       string
	regions                          string         // Regions, "" = single region
	tables                           string         // Tables
	messagesName, controlName        string         // TablesAttach's tables
	n                                map[string]int // numeric fields by name
	enqueue                          bool
	transactional                    bool     // KafkaTransactional
	businessTables                   []string // the enqueue function's callers' tables
}

func (c *config) isSCRAM() bool { return c.auth == AuthSASLSCRAM256 || c.auth == AuthSASLSCRAM512 }

// secrets are the Kafka secrets the functions read, in template order.
func (c *config) secrets() []string {
	var out []string
	for _, s := range []string{c.saslSecret, c.caSecret, c.certSecret} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
func (c *config) useMSKIAM() bool { return c.auth == AuthMSKIAM }
func (c *config) useVPC() bool    { return len(c.subnets) > 0 }

// goarch is the GOARCH `make build` uses for the architecture.
func (c *config) goarch() string {
	if c.arch == ArchX86_64 {
		return "amd64"
	}
	return "arm64"
}

// bootstrapDir is the folder that holds fn's bootstrap for the architecture.
func (c *config) bootstrapDir(fn string) string {
	return filepath.Join(c.binDir, fn, c.goarch())
}

// Validate checks every field and returns a *PropError naming the first
// one that is wrong: each template parameter's bounds, and what the
// template's Rules refuse (the VPC settings given together; each Kafka
// secret with the modes that use it; no reserved concurrency of 0). New
// calls it; call it yourself to check configuration before building a
// stack.
func (p *Props) Validate() error {
	_, err := p.config()
	return err
}

func (p *Props) config() (*config, error) {
	if p == nil {
		return nil, &PropError{"KafkaBootstrapServers", "nil Props", "required: New needs Props with at least KafkaBootstrapServers and KafkaAuthMode"}
	}
	c := &config{props: *p, n: map[string]int{}}
	c.bootstrap = str(p.KafkaBootstrapServers)
	if strings.TrimSpace(c.bootstrap) == "" {
		return nil, &PropError{"KafkaBootstrapServers", quote(p.KafkaBootstrapServers), "required: a comma-separated host:port list (KAFKA_BOOTSTRAP_SERVERS)"}
	}
	c.auth = str(p.KafkaAuthMode)
	if !slices.Contains(authModes, c.auth) {
		return nil, &PropError{"KafkaAuthMode", quote(p.KafkaAuthMode), "required: one of " + strings.Join(authModes, ", ")}
	}
	if err := c.kafkaSecrets(p); err != nil {
		return nil, err
	}
	var err error
	if c.subnets, err = list("VpcSubnetIds", p.VpcSubnetIds); err != nil {
		return nil, err
	}
	if c.securityGroups, err = list("VpcSecurityGroupIds", p.VpcSecurityGroupIds); err != nil {
		return nil, err
	}
	if (len(c.subnets) == 0) != (len(c.securityGroups) == 0) {
		field, empty := "VpcSecurityGroupIds", p.VpcSecurityGroupIds
		if len(c.subnets) == 0 {
			field, empty = "VpcSubnetIds", p.VpcSubnetIds
		}
		return nil, &PropError{field, quoteList(empty), "VpcSubnetIds and VpcSecurityGroupIds go together: give both or neither"}
	}
	for _, r := range numbers {
		v, err := r.value(p)
		if err != nil {
			return nil, err
		}
		c.n[r.name] = v
	}
	if c.n["RelayReservedConcurrency"] == 0 {
		return nil, &PropError{"RelayReservedConcurrency", "0", "0 would throttle every relay invocation; -1 (the default) reserves none"}
	}
	if v := c.n["EnqueueReservedConcurrency"]; v == 0 || v == 1 {
		return nil, &PropError{"EnqueueReservedConcurrency", strconv.Itoa(v), "0 would throttle every enqueue invocation and 1 is below an SQS " +
			"event source's least MaximumConcurrency (2); use 2..10000, or -1 for no reservation"}
	}
	c.topics = str(p.Topics)
	c.regions = str(p.Regions)
	if c.regions != "" {
		// The template's AllowedPattern; the setup function checks the rest
		// (no region twice) against the outbox.
		if !regionsPattern.MatchString(c.regions) {
			return nil, &PropError{"Regions", quote(p.Regions), "comma-separated region ids of a-z, 0-9 and '-', 1..32 characters each"}
		}
		if n := strings.Count(c.regions, ",") + 1; c.n["BucketCount"]%n != 0 {
			return nil, &PropError{"Regions", quote(p.Regions), fmt.Sprintf("BucketCount %d is not a multiple of the %d regions", c.n["BucketCount"], n)}
		}
	}
	if err := c.tablePlacement(p); err != nil {
		return nil, err
	}
	c.mode = ModeDelete
	if p.OutboxMode != nil {
		c.mode = *p.OutboxMode
	}
	if !slices.Contains(modes, c.mode) {
		return nil, &PropError{"OutboxMode", quote(p.OutboxMode), "one of " + strings.Join(modes, ", ")}
	}
	c.arch = ArchARM64
	if p.Architecture != nil {
		c.arch = *p.Architecture
	}
	if c.arch != ArchARM64 && c.arch != ArchX86_64 {
		return nil, &PropError{"Architecture", quote(p.Architecture), "arm64 or x86_64"}
	}
	c.level = "INFO"
	if p.LogLevel != nil {
		c.level = *p.LogLevel
	}
	if !slices.Contains(logLevels, c.level) {
		return nil, &PropError{"LogLevel", quote(p.LogLevel), "one of " + strings.Join(logLevels, ", ")}
	}
	c.alarmTopic = str(p.AlarmTopicArn)
	c.binDir = defaultBinDir
	if p.BinDir != nil {
		c.binDir = *p.BinDir
	}
	if p.EnableEnqueueFunction != nil {
		switch *p.EnableEnqueueFunction {
		case "false":
		case "true":
			c.enqueue = true
		default:
			return nil, &PropError{"EnableEnqueueFunction", quote(p.EnableEnqueueFunction), `"true" or "false"`}
		}
	}
	if p.KafkaTransactional != nil {
		switch *p.KafkaTransactional {
		case "false":
		case "true":
			c.transactional = true
		default:
			return nil, &PropError{"KafkaTransactional", quote(p.KafkaTransactional), `"true" or "false"`}
		}
	}
	if c.businessTables, err = list("EnqueueBusinessTableArns", p.EnqueueBusinessTableArns); err != nil {
		return nil, err
	}
	deployed := functions
	if c.enqueue {
		deployed = append(slices.Clone(functions), "enqueue")
	}
	for _, fn := range deployed {
		if err := checkBootstrap(filepath.Join(c.bootstrapDir(fn), bootstrapName)); err != nil {
			return nil, &PropError{"BinDir", strconv.Quote(c.binDir), err.Error() + "; run `make build` in the outbox repository (it writes bin/<function>/<goarch>/bootstrap) and point BinDir at its bin folder"}
		}
	}
	return c, nil
}

// tablePlacement checks Tables and the attached table names as the
// template's TablesMatchRegions rule and AllowedPatterns do; the setup
// function checks at deploy that the stack's region is one of Regions.
func (c *config) tablePlacement(p *Props) error {
	c.tables = TablesCreate
	if p.Tables != nil {
		c.tables = *p.Tables
	}
	if !slices.Contains([]string{TablesCreate, TablesGlobal, TablesAttach}, c.tables) {
		return &PropError{"Tables", quote(p.Tables), "one of create, global, attach"}
	}
	if c.tables != TablesCreate && c.regions == "" {
		return &PropError{"Tables", quote(p.Tables), "global and attach are region mode's: give Regions (the same list in every region's stack), or use create"}
	}
	c.messagesName, c.controlName = str(p.MessagesTableName), str(p.ControlTableName)
	for _, f := range []struct {
		field, value string
		prop         *string
	}{{"MessagesTableName", c.messagesName, p.MessagesTableName}, {"ControlTableName", c.controlName, p.ControlTableName}} {
		switch {
		case !isToken(f.value) && !tableNamePattern.MatchString(f.value):
			return &PropError{f.field, quote(f.prop), "a DynamoDB table name: 3..255 characters of a-z, A-Z, 0-9, '_', '-' and '.'"}
		case c.tables == TablesAttach && f.value == "":
			return &PropError{f.field, quote(f.prop), "required when Tables is attach: the Tables global stack's " + f.field + " output"}
		case c.tables != TablesAttach && f.value != "":
			return &PropError{f.field, quote(f.prop), "used only by Tables attach; clear it or set Tables attach"}
		}
	}
	return nil
}

// kafkaSecrets checks the Kafka secrets against the auth mode as the
// template's KafkaSecretsMatchAuthMode rule does (the functions refuse the
// same at init), and keeps those the mode uses.
func (c *config) kafkaSecrets(p *Props) error {
	sasl, ca, cert := str(p.KafkaSaslSecretArn), str(p.KafkaTlsCaSecretArn), str(p.KafkaTlsClientCertSecretArn)
	switch {
	case c.isSCRAM() && sasl == "":
		return &PropError{"KafkaSaslSecretArn", quote(p.KafkaSaslSecretArn), "required when KafkaAuthMode is " + c.auth + ": a secret with username and password"}
	case !c.isSCRAM() && sasl != "":
		return &PropError{"KafkaSaslSecretArn", quote(p.KafkaSaslSecretArn), "used only by the sasl-scram modes; clear it or change KafkaAuthMode"}
	case c.auth == AuthMTLS && cert == "":
		return &PropError{"KafkaTlsClientCertSecretArn", quote(p.KafkaTlsClientCertSecretArn), "required when KafkaAuthMode is mtls: a secret with certificate and privateKey"}
	case c.auth != AuthMTLS && cert != "":
		return &PropError{"KafkaTlsClientCertSecretArn", quote(p.KafkaTlsClientCertSecretArn), "used only by KafkaAuthMode mtls; clear it or change KafkaAuthMode"}
	case c.auth == AuthNone && ca != "":
		return &PropError{"KafkaTlsCaSecretArn", quote(p.KafkaTlsCaSecretArn), "needs a TLS mode; KafkaAuthMode none is plaintext"}
	}
	c.saslSecret, c.caSecret, c.certSecret = sasl, ca, cert
	if len(c.secrets()) > 0 {
		c.kmsKey = str(p.KafkaSecretsKmsKeyArn)
	}
	if c.useMSKIAM() {
		c.msk = str(p.MskClusterArn)
		if c.msk != "" && !isToken(c.msk) && len(strings.Split(c.msk, "/")) < 3 {
			return &PropError{"MskClusterArn", quote(p.MskClusterArn), "an MSK cluster ARN: arn:<partition>:kafka:<region>:<account>:cluster/<name>/<uuid>"}
		}
	}
	return nil
}

// value is r's field of p: its default when nil, else the number, which
// must be a whole number within bounds.
func (r intRange) value(p *Props) (int, error) {
	f := *r.field(p)
	if f == nil {
		return r.def, nil
	}
	v := *f
	bounds := fmt.Sprintf("%d..%d", r.min, r.max)
	if r.max == 0 {
		bounds = fmt.Sprintf("at least %d", r.min)
	}
	if r.allowed != nil {
		bounds = "one of " + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.allowed)), ", "), "[]")
	}
	bad := &PropError{r.name, strconv.FormatFloat(v, 'g', -1, 64), bounds + " (" + r.what + ")"}
	switch {
	case math.Abs(v) >= numberTokenMin:
		bad.Want = "a plain number, not a token: it decides what the stack contains; " + bounds
		return 0, bad
	case v != math.Trunc(v) || math.IsNaN(v):
		return 0, bad
	}
	n := int(v)
	switch {
	case r.allowed != nil && !slices.Contains(r.allowed, n),
		r.allowed == nil && (n < r.min || (r.max != 0 && n > r.max)):
		return 0, bad
	}
	return n, nil
}

// checkBootstrap reports why path is not an executable regular file.
func checkBootstrap(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("no %s", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func quote(s *string) string {
	if s == nil {
		return "nil"
	}
	return strconv.Quote(*s)
}

func quoteList(l *[]*string) string {
	if l == nil {
		return "nil"
	}
	q := make([]string, len(*l))
	for i, s := range *l {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func isToken(s string) bool {
	return strings.Contains(s, tokenMarker) || strings.Contains(s, listTokenMark)
}

// list returns the list's strings; an element that is nil or empty is an
// error (CloudFormation would reject the id, later and less clearly).
func list(field string, l *[]*string) ([]string, error) {
	if l == nil {
		return nil, nil
	}
	out := make([]string, 0, len(*l))
	for _, s := range *l {
		if s == nil || strings.TrimSpace(*s) == "" {
			return nil, &PropError{field, quoteList(l), "every element must be a non-empty id"}
		}
		out = append(out, *s)
	}
	return out, nil
}
