package lambdakafka

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/inbox"
)

// Function processes Kafka event-source-mapping invocations through an
// inbox.Handler.
type Function struct {
	h   *inbox.Handler
	cfg config
}

// Option configures New.
type Option func(*config)

type config struct {
	partial bool
	margin  time.Duration
}

// DefaultDeadlineMargin is how long before the invocation's deadline the
// function stops starting records by default.
const DefaultDeadlineMargin = 500 * time.Millisecond

// ReportBatchItemFailures makes Handle report the records not processed in
// its Response (and return a nil error) instead of failing the whole
// invocation. Turn it on only together with FunctionResponseTypes:
// [ReportBatchItemFailures] on the event-source mapping: a mapping without
// it ignores the response and counts the batch as successful, so the
// records not processed would be skipped. Default off: any record not
// processed fails the invocation and the whole batch is retried.
func ReportBatchItemFailures() Option { return func(c *config) { c.partial = true } }

// DeadlineMargin is how long before the invocation's deadline Handle stops
// starting records (and cancels the one in flight), so that it returns its
// response in time: a handler that returns late loses its response and the
// whole batch is retried. Default DefaultDeadlineMargin (500ms); 0..1m.
func DeadlineMargin(d time.Duration) Option { return func(c *config) { c.margin = d } }

// New returns a Function over h (inbox.NewHandler: the inbox, the callback
// and the poison policy). Bad options are an *outbox.OptionError.
func New(h *inbox.Handler, opts ...Option) (*Function, error) {
	c := config{margin: DefaultDeadlineMargin}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case h == nil:
		return nil, &outbox.OptionError{Option: "h", Value: nil, Reason: "an *inbox.Handler is required (inbox.NewHandler)"}
	case c.margin < 0 || c.margin > time.Minute:
		return nil, &outbox.OptionError{Option: "DeadlineMargin", Value: c.margin, Reason: "must be 0..1m"}
	}
	return &Function{h: h, cfg: c}, nil
}

// Response is what the Kafka event-source mapping reads back when its
// FunctionResponseTypes include ReportBatchItemFailures. An empty list
// means the whole batch succeeded.
type Response struct {
	BatchItemFailures []BatchItemFailure `json:"batchItemFailures"`
}

// BatchItemFailure names a record not processed.
type BatchItemFailure struct {
	ItemIdentifier ItemIdentifier `json:"itemIdentifier"`
}

// ItemIdentifier is a Kafka record in a partial batch response: the
// topic-partition key of the event's records map ("<topic>-<partition>")
// and the record's offset.
type ItemIdentifier struct {
	Partition string `json:"partition"`
	Offset    int64  `json:"offset"`
}

// NotProcessedError is Handle's error when records were not processed and
// ReportBatchItemFailures is off: Failures names the first one of each
// topic-partition that stopped, Errs says why.
type NotProcessedError struct {
	Failures []BatchItemFailure
	Errs     []error
}

func (e *NotProcessedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lambdakafka: %d partition(s) stopped; the batch will be delivered again:", len(e.Failures))
	for i, f := range e.Failures {
		fmt.Fprintf(&b, " %s@%d: %v;", f.ItemIdentifier.Partition, f.ItemIdentifier.Offset, e.Errs[i])
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap returns the records' errors.
func (e *NotProcessedError) Unwrap() []error { return e.Errs }

// Handle processes ev: each topic-partition's records in offset order,
// stopping at its first record not done (see the package doc for what the
// mapping is then told). Records of different partitions are processed one
// partition after another. A record Lambda delivered that cannot be decoded
// (bad base64) is handed to the poison policy as a *inbox.RecordError.
func (f *Function) Handle(ctx context.Context, ev events.KafkaEvent) (Response, error) {
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-f.cfg.margin))
		defer cancel()
	}
	var failed NotProcessedError
	for _, key := range slices.Sorted(maps.Keys(ev.Records)) {
		recs := slices.Clone(ev.Records[key])
		slices.SortStableFunc(recs, func(a, b events.KafkaRecord) int { return cmp.Compare(a.Offset, b.Offset) })
		for _, kr := range recs {
			err := ctx.Err()
			if err == nil {
				r, derr := Record(kr)
				if derr != nil {
					_, err = f.h.Reject(ctx, r, derr)
				} else {
					_, err = f.h.Handle(ctx, r)
				}
			}
			if err != nil {
				failed.Failures = append(failed.Failures, BatchItemFailure{ItemIdentifier{Partition: key, Offset: kr.Offset}})
				failed.Errs = append(failed.Errs, err)
				break
			}
		}
	}
	resp := Response{BatchItemFailures: failed.Failures}
	if resp.BatchItemFailures == nil {
		resp.BatchItemFailures = []BatchItemFailure{}
	}
	if len(failed.Failures) == 0 || f.cfg.partial {
		return resp, nil
	}
	return resp, &failed
}

// Record converts a record of a Kafka event into the *kgo.Record the inbox
// processes: key and value decoded from base64, headers in order. A key or
// value that is not valid base64 is a *inbox.RecordError (Handle hands
// such a record to the poison policy, with the fields as Lambda sent them).
func Record(kr events.KafkaRecord) (*kgo.Record, error) {
	r := &kgo.Record{Topic: kr.Topic, Partition: int32(kr.Partition), Offset: kr.Offset, Timestamp: kr.Timestamp.Time}
	for _, hm := range kr.Headers {
		for _, k := range slices.Sorted(maps.Keys(hm)) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(hm[k])})
		}
	}
	key, kerr := base64.StdEncoding.DecodeString(kr.Key)
	value, verr := base64.StdEncoding.DecodeString(kr.Value)
	if kerr != nil || verr != nil {
		r.Key, r.Value = []byte(kr.Key), []byte(kr.Value)
		return r, &inbox.RecordError{Topic: kr.Topic, Partition: r.Partition, Offset: kr.Offset, Header: "(key or value)",
			Reason: fmt.Sprintf("not valid base64 in the Lambda event (%v); the record is kept as Lambda sent it", errors.Join(kerr, verr))}
	}
	if kr.Key != "" {
		r.Key = key
	}
	if kr.Value != "" {
		r.Value = value
	}
	return r, nil
}
