package inbox

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
)

// Policy is what a Consumer (or Handler) does with a record it cannot
// process: a permanent error (a *RecordError, an *outbox.ValidationError, a
// callback error wrapped with Permanent), or a transient one still failing
// after RecordRetries. Stop (the default), Skip or DeadLetterTo.
// docs/inbox.md says what each one loses.
type Policy struct {
	kind policyKind
	sink DeadLetterSink
}

type policyKind int

const (
	policyStop policyKind = iota
	policySkip
	policyDeadLetter
)

// Stop: the consumer stops at the record, with the records before it
// committed; Run returns the record's error and a new Consumer resumes at
// it. Nothing is lost; one bad record halts its partition until someone
// acts. The default.
func Stop() Policy { return Policy{kind: policyStop} }

// Skip: the record is logged (WARN, with its topic, partition, offset and
// error), reported to Metrics as Skipped, and committed. Its effect is
// lost, visibly.
func Skip() Policy { return Policy{kind: policySkip} }

// DeadLetterTo: the record is written to sink (with its error and where it
// came from), reported to Metrics as DeadLettered, logged (WARN) and
// committed. If writing the dead letter fails, the consumer stops at the
// record as with Stop: a record is never committed before it is kept
// somewhere.
func DeadLetterTo(sink DeadLetterSink) Policy { return Policy{kind: policyDeadLetter, sink: sink} }

func (p Policy) check() error {
	if p.kind != policyDeadLetter {
		return nil
	}
	if p.sink == nil {
		return &outbox.OptionError{Option: "OnPoison", Value: nil, Reason: "DeadLetterTo needs a sink: DeadLetterTopic or DeadLetterTable"}
	}
	if c, ok := p.sink.(interface{ check() error }); ok {
		return c.check()
	}
	return nil
}

// DeadLetter is a record the consumer could not process.
type DeadLetter struct {
	// Record is the record as consumed: topic, partition, offset, key,
	// value, headers.
	Record *kgo.Record
	// Err is why it could not be processed (the last attempt's error).
	Err error
	// Attempts is how many times it was processed.
	Attempts int
	// At is when it was given up on (the inbox's clock).
	At time.Time
}

// DeadLetterSink keeps dead letters. DeadLetter must return nil only once
// d is stored durably (the record's offset is committed next), and must be
// safe for concurrent use and to call again with the same record (a crash
// before the offset commit delivers the record again).
type DeadLetterSink interface {
	DeadLetter(ctx context.Context, d DeadLetter) error
}

// Headers a dead letter carries on a dead-letter topic, after the
// record's own, and attributes of a dead-letter table's items.
const (
	DeadLetterErrorHeader     = "x-dead-letter-error"
	DeadLetterTopicHeader     = "x-dead-letter-topic"
	DeadLetterPartitionHeader = "x-dead-letter-partition"
	DeadLetterOffsetHeader    = "x-dead-letter-offset"
	DeadLetterAttemptsHeader  = "x-dead-letter-attempts"
	DeadLetterAtHeader        = "x-dead-letter-at" // RFC 3339, UTC
)

// DeadLetterTopic writes dead letters to a Kafka topic, produced through cl
// (acknowledged before the record is committed): the original key, value
// and headers, plus the headers DeadLetterErrorHeader, ...TopicHeader,
// ...PartitionHeader, ...OffsetHeader, ...AttemptsHeader and ...AtHeader.
// The original headers include the outbox's stamped ones, so a replay of
// the dead letter to the source topic is deduplicated by the inbox. cl nil:
// the Consumer's own client (NewConsumer only; a Handler needs one). The
// topic must exist.
func DeadLetterTopic(topic string, cl *kgo.Client) DeadLetterSink {
	return &topicSink{topic: topic, cl: cl}
}

type topicSink struct {
	topic string
	cl    *kgo.Client
}

func (s *topicSink) check() error {
	if s.topic == "" {
		return &outbox.OptionError{Option: "DeadLetterTopic", Value: `""`, Reason: "name the dead-letter topic"}
	}
	return nil
}

func (s *topicSink) DeadLetter(ctx context.Context, d DeadLetter) error {
	r := d.Record
	hs := append(append([]kgo.RecordHeader(nil), r.Headers...),
		kgo.RecordHeader{Key: DeadLetterErrorHeader, Value: []byte(d.Err.Error())},
		kgo.RecordHeader{Key: DeadLetterTopicHeader, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: DeadLetterPartitionHeader, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: DeadLetterOffsetHeader, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		kgo.RecordHeader{Key: DeadLetterAttemptsHeader, Value: []byte(strconv.Itoa(d.Attempts))},
		kgo.RecordHeader{Key: DeadLetterAtHeader, Value: []byte(d.At.UTC().Format(time.RFC3339Nano))})
	out := &kgo.Record{Topic: s.topic, Key: r.Key, Value: r.Value, Headers: hs}
	if err := s.cl.ProduceSync(ctx, out).FirstErr(); err != nil {
		return fmt.Errorf("produce to dead-letter topic %s: %w", s.topic, err)
	}
	return nil
}

// DeadLetterAPI is the part of the DynamoDB client DeadLetterTable uses.
type DeadLetterAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// DeadLetterTable writes dead letters to a DynamoDB table (key pk (S); the
// inbox's processed-ids table layout, so CreateTable makes one), one item
// per record, keyed "d#<topic>#<partition>#<offset>" (a record dead-lettered
// again overwrites its own item):
//
//	pk, t (topic), p (partition), o (offset), k (key, B), val (value, B),
//	h (headers: a list of maps {k: S, v: B}), err (S), n (attempts), at (RFC 3339)
//
// An item holds at most 400 KB: a larger record cannot be dead-lettered
// here (the consumer stops at it); use DeadLetterTopic for large records.
// The client's retryer retries the put (the one retry layer for it).
func DeadLetterTable(client DeadLetterAPI, table string) DeadLetterSink {
	return &tableSink{client: client, table: table}
}

type tableSink struct {
	client DeadLetterAPI
	table  string
}

func (s *tableSink) check() error {
	if s.client == nil {
		return &outbox.OptionError{Option: "DeadLetterTable", Value: nil, Reason: "a DynamoDB client is required"}
	}
	return checkTableName(s.table)
}

// DeadLetterKey is the key of a record's item in a DeadLetterTable.
func DeadLetterKey(topic string, partition int32, offset int64) string {
	return "d#" + topic + "#" + strconv.Itoa(int(partition)) + "#" + strconv.FormatInt(offset, 10)
}

func (s *tableSink) DeadLetter(ctx context.Context, d DeadLetter) error {
	r := d.Record
	hs := make([]types.AttributeValue, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"k": str(h.Key), "v": &types.AttributeValueMemberB{Value: nonNil(h.Value)}}}
	}
	item := key(DeadLetterKey(r.Topic, r.Partition, r.Offset))
	item[attrTopic] = str(r.Topic)
	item[attrPart] = num(int64(r.Partition))
	item[attrOffset] = num(r.Offset)
	item["k"] = &types.AttributeValueMemberB{Value: nonNil(r.Key)}
	item["val"] = &types.AttributeValueMemberB{Value: nonNil(r.Value)}
	item["h"] = &types.AttributeValueMemberL{Value: hs}
	item["err"] = str(d.Err.Error())
	item["n"] = num(int64(d.Attempts))
	item[attrAt] = str(d.At.UTC().Format(time.RFC3339Nano))
	item[attrVersion] = num(formatVersion)
	if _, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}); err != nil {
		return fmt.Errorf("put to dead-letter table %s: %w", s.table, err)
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
