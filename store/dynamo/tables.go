package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/dynakafka/outbox"
)

// AdminAPI is the part of the DynamoDB client CreateTables uses:
// CreateTable, DescribeTable, DescribeTimeToLive, UpdateTimeToLive, GetItem,
// PutItem and UpdateItem. *dynamodb.Client has them.
type AdminAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	// UpdateItem records the messages table in the config item, and
	// changes the topics of an existing one (Topics).
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// The single methods that internal helpers need.
type (
	getItemAPI interface {
		GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	}
	putItemAPI interface {
		PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	}
	updateItemAPI interface {
		UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	}
)

// ErrNoConfig: the control table has no config item, so the outbox was never
// created (or the table name is wrong).
var ErrNoConfig = errors.New("dynamo: the control table has no outbox config item; create the outbox with dynamo.CreateTables, or check the control table name")

// TableError reports an outbox table that cannot be used as configured: it
// does not exist in the client's account and region, or it has another key
// schema. NewWriter returns it at start, before anything is written. For the
// control table it also matches ErrNoConfig.
type TableError struct {
	Option string // "Tables.Messages" or "Tables.Control"
	Table  string
	Reason string // what is wrong and what to fix
	Err    error  // DynamoDB's answer
}

func (e *TableError) Error() string {
	return fmt.Sprintf("dynamo: %s %q: %s: %v", e.Option, e.Table, e.Reason, e.Err)
}

func (e *TableError) Unwrap() error { return e.Err }

// Is reports a missing control table as ErrNoConfig too: there is no config
// item without it.
func (e *TableError) Is(target error) bool {
	return target == ErrNoConfig && e.Option == "Tables.Control"
}

// missingTable is the *TableError for a table that DynamoDB does not know.
func missingTable(option, table string, err error) *TableError {
	return &TableError{Option: option, Table: table, Err: err,
		Reason: "the table does not exist in this client's account and region; create the outbox with dynamo.CreateTables " +
			"(or deploy its tables), or correct the table name and the client's region"}
}

// neverKey is a messages-table key that no item ever has: buckets are never
// negative and sequence numbers start at 1.
func neverKey() map[string]types.AttributeValue { return messageKey(-1, 0) }

// checkMessagesTable reads neverKey from the messages table: one
// eventually consistent GetItem (half a read unit) that tells a missing
// table, or a table with another key schema, from a usable one before a
// writer reserves sequence numbers for messages it could never store.
func checkMessagesTable(ctx context.Context, client getItemAPI, table string) error {
	_, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: str(table), Key: neverKey()})
	var notFound *types.ResourceNotFoundException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &notFound):
		return missingTable("Tables.Messages", table, err)
	case apiCode(err) == "ValidationException":
		return &TableError{Option: "Tables.Messages", Table: table, Err: err,
			Reason: fmt.Sprintf("the table's key is not the messages table's (%s N, %s N); are Tables.Messages and Tables.Control swapped?", attrBucket, attrSeq)}
	default:
		return fmt.Errorf("dynamo: check the messages table %s (a writer needs dynamodb:GetItem on it): %w", table, err)
	}
}

// tableWait bounds how long CreateTables waits for a table to become ACTIVE.
const tableWait = 5 * time.Minute

// CreateTables creates the outbox's two tables if they do not exist, waits
// until both are ACTIVE, enables TTL on attribute x on both, and writes the
// config item: BucketCount (default outbox.DefaultBucketCount), Mode
// (default outbox.DeleteMode) and, in WatermarkMode, Retention (default
// DefaultRetention; at least MinRetention, because a message pending longer
// than its TTL can be deleted by DynamoDB before it is published), and the
// format version. Both tables are PAY_PER_REQUEST; the messages table has
// key b (N) / s (N) and a KEYS_ONLY stream, the control table key pk (S) /
// sk (S).
//
// It is idempotent: running it again with the same settings changes nothing.
// An existing table with another key schema (or a messages table without a
// stream), TTL on another attribute, or a config item with another
// BucketCount, Mode or Retention is a *outbox.MisconfigurationError; so is
// a Topics list that drops a stored topic without ReplaceTopics (a
// *TopicsDroppedError); nothing is changed then (Configure changes a config
// item).
func CreateTables(ctx context.Context, client AdminAPI, tables Tables, opts ...TablesOption) error {
	s := defaultSettings()
	applyOptions(&s, opts)
	if err := checkOpen(client, tables, &s); err != nil {
		return err
	}
	topics, err := cleanTopics(s.topics)
	if err != nil {
		return &outbox.OptionError{Option: "Topics", Value: s.topics, Reason: err.Error()}
	}
	if s.replaceTopics && !s.topicsSet {
		return &outbox.OptionError{Option: "ReplaceTopics", Value: true, Reason: "needs Topics: the list that replaces the stored one"}
	}
	want := outbox.Config{BucketCount: s.bucketCount, Mode: s.mode, Retention: s.retention, Topics: topics,
		MaxMessageBytes: s.maxMessageBytes, Headers: s.headers, Regions: s.regions}
	if want.BucketCount == 0 {
		want.BucketCount = outbox.DefaultBucketCount
	}
	if want.Mode == outbox.WatermarkMode && want.Retention == 0 {
		want.Retention = DefaultRetention
	}
	if err := want.CheckRegions(); err != nil {
		return &outbox.OptionError{Option: "Regions", Value: s.regions, Reason: err.Error()}
	}

	if err := checkNewPairing(ctx, client, tables); err != nil {
		return err
	}
	specs := []tableSpec{
		{name: tables.Messages, role: "Tables.Messages", hash: attrBucket, rng: attrSeq, typ: types.ScalarAttributeTypeN, stream: true},
		{name: tables.Control, role: "Tables.Control", hash: attrPK, rng: attrSK, typ: types.ScalarAttributeTypeS},
	}
	for _, t := range specs {
		if err := t.create(ctx, client); err != nil {
			return err
		}
	}
	for _, t := range specs {
		if err := dynamodb.NewTableExistsWaiter(client).Wait(ctx, &dynamodb.DescribeTableInput{TableName: str(t.name)}, tableWait); err != nil {
			return fmt.Errorf("dynamo: wait for table %s to become active: %w", t.name, err)
		}
	}
	if err := checkSingleRegion(ctx, client, tables, want.RegionMode()); err != nil {
		return err
	}
	for _, t := range specs {
		if err := enableTTL(ctx, client, t); err != nil {
			return err
		}
	}
	if err := putConfig(ctx, client, tables.Control, want, s.topicsSet, s.replaceTopics); err != nil {
		return err
	}
	return recordPairing(ctx, client, tables)
}

type tableSpec struct {
	name, role string
	hash, rng  string
	typ        types.ScalarAttributeType
	stream     bool
}

func (t tableSpec) create(ctx context.Context, client AdminAPI) error {
	in := &dynamodb.CreateTableInput{
		TableName: str(t.name),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: str(t.hash), AttributeType: t.typ},
			{AttributeName: str(t.rng), AttributeType: t.typ},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: str(t.hash), KeyType: types.KeyTypeHash},
			{AttributeName: str(t.rng), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	}
	if t.stream {
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: new(true), StreamViewType: types.StreamViewTypeKeysOnly}
	}
	_, err := client.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inUse):
		return t.check(ctx, client)
	default:
		return fmt.Errorf("dynamo: create table %s: %w", t.name, err)
	}
}

// check verifies that an existing table has the layout the outbox needs.
func (t tableSpec) check(ctx context.Context, client AdminAPI) error {
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: str(t.name)})
	if err != nil {
		return fmt.Errorf("dynamo: describe existing table %s: %w", t.name, err)
	}
	d := out.Table
	attrTypes := map[string]string{}
	for _, a := range d.AttributeDefinitions {
		attrTypes[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	var hash, rng string
	for _, k := range d.KeySchema {
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = aws.ToString(k.AttributeName)
		case types.KeyTypeRange:
			rng = aws.ToString(k.AttributeName)
		}
	}
	want := fmt.Sprintf("key %s (%s) / %s (%s)", t.hash, t.typ, t.rng, t.typ)
	have := fmt.Sprintf("key %s (%s) / %s (%s)", hash, attrTypes[hash], rng, attrTypes[rng])
	if t.stream {
		want += " with a stream"
		if d.StreamSpecification == nil || d.StreamSpecification.StreamEnabled == nil || !*d.StreamSpecification.StreamEnabled {
			have += " without a stream"
		} else {
			have += " with a stream"
		}
	}
	if want != have {
		return &outbox.MisconfigurationError{Setting: t.role, Configured: fmt.Sprintf("%s: %s", t.name, want), Stored: have,
			Fix: "name a table that does not exist yet (CreateTables creates it) or one created by CreateTables"}
	}
	return nil
}

// errUnknownOperation is the code DynamoDB Local answers for an API it does
// not implement.
const errUnknownOperation = "UnknownOperationException"

func enableTTL(ctx context.Context, client AdminAPI, t tableSpec) error {
	d, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: str(t.name)})
	if apiCode(err) == errUnknownOperation {
		// Only a local engine lacks the TTL API; it never expires items
		// either, which changes nothing but storage in tests.
		return nil
	}
	if err != nil {
		return fmt.Errorf("dynamo: describe TTL of table %s: %w", t.name, err)
	}
	if desc := d.TimeToLiveDescription; desc != nil {
		switch desc.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if attr := aws.ToString(desc.AttributeName); attr != attrTTL {
				return &outbox.MisconfigurationError{Setting: t.role + " TTL", Configured: attrTTL, Stored: attr,
					Fix: "the outbox expires fences and heartbeats by attribute x; disable the table's TTL or use another table"}
			}
			return nil
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               str(t.name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: str(attrTTL), Enabled: new(true)},
	})
	if err != nil && apiCode(err) != errUnknownOperation {
		return fmt.Errorf("dynamo: enable TTL on attribute %s of table %s: %w", attrTTL, t.name, err)
	}
	return nil
}

// putConfig writes a new config item, or checks an existing one against
// want; with setTopics it changes the stored topics to want's (refusing a
// list that drops a stored topic, unless replace).
func putConfig(ctx context.Context, client AdminAPI, table string, want outbox.Config, setTopics, replace bool) error {
	err := writeNewConfig(ctx, client, table, want)
	if !isConditionFailed(err) {
		return err
	}
	stored, err := readConfig(ctx, client, table)
	if err != nil {
		return err
	}
	if err := checkBucketCount(want.BucketCount, stored.BucketCount,
		"pass the stored BucketCount; to change it, run outbox buckets set N (dynamo.ChangeBucketCount), which changes it online while writers and relays run"); err != nil {
		return err
	}
	if want.Mode != stored.Mode {
		return &outbox.MisconfigurationError{Setting: "Mode", Configured: want.Mode.String(), Stored: stored.Mode.String(),
			Fix: "pass the stored mode (changing it needs a drained outbox: see dynamo.Configure)"}
	}
	if !slices.Equal(want.Regions, stored.Regions) {
		return &outbox.MisconfigurationError{Setting: "Regions", Configured: strings.Join(want.Regions, ","), Stored: strings.Join(stored.Regions, ","),
			Fix: "pass the stored regions (changing them needs a drained outbox: see dynamo.Configure)"}
	}
	if want.Retention != stored.Retention {
		return &outbox.MisconfigurationError{Setting: "Retention", Configured: want.Retention.String(), Stored: stored.Retention.String(),
			Fix: "pass the stored retention, or change it with dynamo.Configure (outbox init --retention)"}
	}
	if err := sameShared(want, stored); err != nil {
		return err
	}
	if setTopics && !slices.Equal(want.Topics, stored.Topics) {
		if dropped := droppedTopics(stored.Topics, want.Topics); len(dropped) > 0 && !replace {
			return &TopicsDroppedError{Stored: stored.Topics, Requested: want.Topics, Dropped: dropped}
		}
		c := stored
		c.Topics = want.Topics
		return replaceConfig(ctx, client, table, stored, c)
	}
	return nil
}

// sameShared checks that the MaxMessageBytes and header names CreateTables
// was given (want's non-zero ones) are an existing outbox's: with
// BucketCount, the mode, the retention and the regions above, the one
// expected-value guard of the CLI's outbox init (docs/design.md §12).
// CreateTables does not change them; Configure does. A setting the item
// does not state is its default.
func sameShared(want, stored outbox.Config) error {
	fix := func(opt string) string {
		return "pass the stored " + opt + " or leave it out; to change it, change the config item with dynamo.Configure (the stack's setup does), then restart the writers, relays and consumers"
	}
	if want.MaxMessageBytes != 0 && want.MaxMessageBytes != stored.SharedMaxMessageBytes() {
		return &outbox.MisconfigurationError{Setting: "MaxMessageBytes", Configured: strconv.Itoa(want.MaxMessageBytes),
			Stored: strconv.Itoa(stored.SharedMaxMessageBytes()), Fix: fix("MaxMessageBytes")}
	}
	have := stored.SharedHeaders()
	for _, h := range []struct{ setting, want, stored string }{
		{"MessageIDHeader", want.Headers.MessageID, have.MessageID},
		{"BucketHeader", want.Headers.Bucket, have.Bucket},
		{"SequenceHeader", want.Headers.Sequence, have.Sequence},
	} {
		if h.want != "" && h.want != h.stored {
			return &outbox.MisconfigurationError{Setting: h.setting, Configured: strconv.Quote(h.want), Stored: strconv.Quote(h.stored), Fix: fix(h.setting)}
		}
	}
	return nil
}

// TopicsDroppedError is CreateTables refusing a Topics list that leaves out
// topics of the stored one: writers that write them would refuse their
// messages once they restart. Nothing was changed. It matches
// *outbox.MisconfigurationError.
type TopicsDroppedError struct {
	Stored, Requested []string
	Dropped           []string // in Stored, not in Requested
}

func (e *TopicsDroppedError) Error() string {
	return fmt.Sprintf("dynamo: the topic list %s drops %s of the outbox's topics %s; nothing was changed. "+
		"Add them to the list if writers still write them, or pass ReplaceTopics (outbox init --replace-topics) to drop them",
		TopicList(e.Requested), strings.Join(e.Dropped, ","), TopicList(e.Stored))
}

// Unwrap makes a TopicsDroppedError match *outbox.MisconfigurationError.
func (e *TopicsDroppedError) Unwrap() error {
	return &outbox.MisconfigurationError{Setting: "Topics", Configured: TopicList(e.Requested), Stored: TopicList(e.Stored),
		Fix: "keep " + strings.Join(e.Dropped, ",") + " in the list, or pass ReplaceTopics (outbox init --replace-topics) to drop them"}
}

// droppedTopics returns the topics of stored that want leaves out; none
// when want is empty (any topic) or stored is (any topic before: a first
// list is set, not a drop).
func droppedTopics(stored, want []string) []string {
	if len(want) == 0 {
		return nil
	}
	var out []string
	for _, t := range stored {
		if !slices.Contains(want, t) {
			out = append(out, t)
		}
	}
	return out
}

// readConfig reads the config item, consistently.
func readConfig(ctx context.Context, client getItemAPI, table string) (outbox.Config, error) {
	c, _, err := readConfigItem(ctx, client, table)
	return c, err
}

// readConfigItem is readConfig that also returns the item.
func readConfigItem(ctx context.Context, client getItemAPI, table string) (outbox.Config, map[string]types.AttributeValue, error) {
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      str(table),
		Key:            controlKey(configPK, configSK),
		ConsistentRead: new(true),
	})
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return outbox.Config{}, nil, missingTable("Tables.Control", table, err)
	}
	if apiCode(err) == "ValidationException" {
		// DynamoDB's "One of the required keys was not given a value":
		// the table's key is not pk/sk.
		return outbox.Config{}, nil, &TableError{Option: "Tables.Control", Table: table, Err: err,
			Reason: fmt.Sprintf("the table's key is not the control table's (%s S, %s S); are Tables.Messages and Tables.Control swapped?", attrPK, attrSK)}
	}
	if err != nil {
		return outbox.Config{}, nil, fmt.Errorf("dynamo: read the config item from %s: %w", table, err)
	}
	if len(out.Item) == 0 {
		return outbox.Config{}, nil, fmt.Errorf("%w (table %s)", ErrNoConfig, table)
	}
	c, err := decodeConfig(out.Item)
	var me *outbox.MisconfigurationError
	switch {
	case errors.As(err, &me):
		return outbox.Config{}, nil, err
	case err != nil:
		return outbox.Config{}, nil, fmt.Errorf("dynamo: config item in %s: %w", table, err)
	}
	return c, out.Item, nil
}

// openOutbox validates what NewStore and NewWriter were given and reads the
// config item; s then holds its shared settings (MaxMessageBytes and the
// header names).
func openOutbox(ctx context.Context, client getItemAPI, tables Tables, s *settings) (outbox.Config, error) {
	if err := checkOpen(client, tables, s); err != nil {
		return outbox.Config{}, err
	}
	stored, item, err := readConfigItem(ctx, client, tables.Control)
	if err != nil {
		return outbox.Config{}, err
	}
	if err := checkPairing(item, tables); err != nil {
		return stored, err
	}
	s.maxMessageBytes, s.headers = stored.SharedMaxMessageBytes(), stored.SharedHeaders()
	return stored, nil
}

// checkOpen validates the settings, tables and client (an SDK client
// interface) a constructor is given, before any call.
func checkOpen(client any, tables Tables, s *settings) error {
	if err := s.validate(); err != nil {
		return err
	}
	if err := tables.validate(); err != nil {
		return err
	}
	if client == nil {
		return &outbox.OptionError{Option: "client", Value: nil, Reason: "a DynamoDB client is required"}
	}
	return nil
}

// checkBucketCount compares a configured bucket count (0: none) with the
// stored one.
func checkBucketCount(configured, stored int, fix string) error {
	if configured == 0 || configured == stored {
		return nil
	}
	return &outbox.MisconfigurationError{Setting: "BucketCount", Configured: strconv.Itoa(configured), Stored: strconv.Itoa(stored), Fix: fix}
}

// apiCode is the error code of a DynamoDB API error, "" for other errors.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}
