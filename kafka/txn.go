package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
)

// TxnPublisher publishes each Publish call — one drained batch of one bucket
// — as one Kafka transaction under the bucket's own transactional id
// (TransactionalID). Only a committed transaction counts as acknowledged:
// Publish reports its records acked only after EndTransaction committed, and
// none if any record failed (the transaction is aborted, so a read_committed
// consumer never sees them).
//
// The fence: a new holder of a bucket initialises a producer under the same
// transactional id when it acquires the bucket, before it reads it
// (FenceHolders, which the relay calls as an outbox.HolderFencer), which
// bumps the id's epoch at the transaction coordinator.
// The broker then aborts the previous holder's open transaction and refuses
// its further produce and commit requests (PRODUCER_FENCED or
// INVALID_PRODUCER_EPOCH, a *FencedError): a stalled or stale holder's
// in-flight records are never visible to read_committed consumers. A lease
// alone cannot give this (docs/design.md).
//
// Consumers must read with isolation level read_committed (inbox does by
// default); read_uncommitted consumers see aborted records too.
type TxnPublisher struct {
	p      *Publisher // options, topic checks, records and errors
	prefix string
	txnTTL time.Duration

	mu      sync.Mutex
	buckets map[int]*txnBucket
}

// txnBucket is one bucket's transactional client; sem (a lock that a
// context can give up waiting for) serialises its transactions (a producer
// has one open transaction at a time).
type txnBucket struct {
	sem chan struct{}
	cl  *kgo.Client // nil until the first Publish, and after a fence
}

func (b *txnBucket) lock()   { b.sem <- struct{}{} }
func (b *txnBucket) unlock() { <-b.sem }

// lockCtx is lock until ctx is done.
func (b *txnBucket) lockCtx(ctx context.Context) error {
	select {
	case b.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var (
	_ outbox.Publisher     = (*TxnPublisher)(nil)
	_ outbox.Isolator      = (*TxnPublisher)(nil)
	_ outbox.HolderFencer  = (*TxnPublisher)(nil)
	_ outbox.ConfigChecker = (*TxnPublisher)(nil)
)

// TransactionalID is the transactional id of bucket's producer: prefix (one
// per outbox, e.g. its messages table's name) and the bucket number.
func TransactionalID(prefix string, bucket int) string {
	return fmt.Sprintf("%s-bucket-%d", prefix, bucket)
}

// FencedError reports that the broker fenced this holder's producer: another
// holder of the bucket initialised the same transactional id. Nothing of the
// transaction is visible to read_committed consumers; the holder should stop
// publishing the bucket (its lease is gone). It is retriable: nothing is
// wrong with the messages, and the bucket's holder publishes them.
type FencedError struct {
	TransactionalID string
	Err             error // kerr.ProducerFenced, kerr.InvalidProducerEpoch, ...
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("kafka: transactional id %q: fenced by a newer producer (another holder of the bucket initialised it): %v; nothing of this transaction is visible to read_committed consumers", e.TransactionalID, e.Err)
}

func (e *FencedError) Unwrap() error { return e.Err }

// OutboxErrorClass implements outbox.Classifier: Retriable.
func (e *FencedError) OutboxErrorClass() outbox.ErrorClass { return outbox.Retriable }

// NewTxnPublisher is NewPublisher for the transactional mode: every option of
// NewPublisher applies, and prefix names the outbox in the transactional ids
// (TransactionalID). The transaction timeout is LeaseDuration: the broker
// aborts a transaction its holder left open longer than a lease.
func NewTxnPublisher(ctx context.Context, seeds []string, prefix string, opts ...Option) (*TxnPublisher, error) {
	if prefix == "" {
		return nil, &outbox.OptionError{Option: "prefix", Value: prefix, Reason: "name the outbox (e.g. its messages table) so that each bucket has its own transactional id"}
	}
	p, err := NewPublisher(ctx, seeds, opts...)
	if err != nil {
		return nil, err
	}
	return &TxnPublisher{p: p, prefix: prefix, txnTTL: p.cfg.leaseDuration, buckets: make(map[int]*txnBucket)}, nil
}

// Publish publishes msgs, which must all be of one bucket, as one
// transaction. acked is the number of leading messages committed: all that
// were produced, or 0 when the transaction was aborted. A message refused
// before producing (invalid, too large) ends the transaction before it: the
// ones before it are committed and err names it, as Publisher.Publish does.
// Publish waits for every produced record's answer (kgo fails the buffered
// ones when ctx or DeliveryTimeout ends; one in flight waits for the broker
// or the request timeout) and, on failure, for the abort. A commit not
// answered (ctx ended, a connection or the coordinator lost) returns an
// error wrapping ErrCommitUnknown after an abort, so that no transaction is
// left open to hold back read_committed consumers; the abort runs on a
// context of its own, within the Publish's DeliveryTimeout and at most
// AbandonGrace after ctx is done (so it may not complete, see abort).
func (t *TxnPublisher) Publish(ctx context.Context, msgs []outbox.Message) (acked int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	p := t.p
	if p.closed.Load() {
		return 0, wrapMessage(msgs[0], ErrClosed)
	}
	bucket := msgs[0].Bucket
	if err := oneBucket(msgs); err != nil {
		return 0, err
	}
	n, stopErr := p.precheck(ctx, msgs)
	if n == 0 {
		return 0, wrapMessage(msgs[0], stopErr)
	}
	b := t.bucket(bucket)
	b.lock()
	defer b.unlock()
	id := TransactionalID(t.prefix, bucket)
	if b.cl == nil {
		// Never a producer of its own: only FenceHolders, which the relay
		// calls under the bucket's lease, initialises one
		// (outbox.HolderFencer's contract).
		return 0, wrapMessage(msgs[0], fmt.Errorf("kafka: bucket %d (transactional id %q) has no producer this process fenced with: %w", bucket, id, outbox.ErrFenceRequired))
	}
	cl := b.cl

	rctx, cancel := context.WithTimeout(ctx, p.cfg.deliveryTimeout)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.drop(b)
		return 0, wrapMessage(msgs[0], fmt.Errorf("kafka: begin transaction %q: %w", id, err))
	}
	recs, errs := t.produce(rctx, cl, msgs[:n])
	if failed := slices.IndexFunc(errs, func(err error) bool { return err != nil }); failed >= 0 {
		return 0, t.abortFailed(ctx, rctx, b, id, &msgs[failed], recs[failed], errs[failed])
	}
	if err := t.commit(ctx, rctx, b, id); err != nil {
		return 0, wrapMessage(msgs[0], err)
	}
	if stopErr != nil {
		return n, wrapMessage(msgs[n], stopErr)
	}
	return n, nil
}

// oneBucket refuses msgs of more than one bucket: each bucket publishes
// under its own transactional id.
func oneBucket(msgs []outbox.Message) error {
	bucket := msgs[0].Bucket
	for i := range msgs {
		if msgs[i].Bucket != bucket {
			return wrapMessage(msgs[i], &outbox.ValidationError{Index: i, Field: "Bucket",
				Reason: fmt.Sprintf("%d in a transactional publish of bucket %d; each bucket publishes under its own transactional id", msgs[i].Bucket, bucket)})
		}
	}
	return nil
}

// produce produces msgs in the open transaction and waits for every
// record's answer: errs[i] is msgs[i]'s.
func (t *TxnPublisher) produce(rctx context.Context, cl *kgo.Client, msgs []outbox.Message) (recs []*kgo.Record, errs []error) {
	recs = make([]*kgo.Record, len(msgs))
	errs = make([]error, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		recs[i] = t.p.record(rctx, &msgs[i])
		wg.Add(1)
		cl.Produce(rctx, recs[i], func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	// kgo reports every record of a transactional producer: it fails the
	// buffered ones when the records' context ends.
	wg.Wait()
	return recs, errs
}

// abortFailed aborts the transaction after msg, the first message whose
// record rec failed with cause: the records appended before the failure
// are marked aborted and never reach read_committed consumers. It returns
// the error Publish reports, naming msg.
func (t *TxnPublisher) abortFailed(ctx, rctx context.Context, b *txnBucket, id string, msg *outbox.Message, rec *kgo.Record, cause error) error {
	p := t.p
	if fenced(cause) {
		t.drop(b) // the newer holder's initialisation aborted it
		return wrapMessage(*msg, &FencedError{TransactionalID: id, Err: cause})
	}
	if err := t.abort(ctx, rctx, b.cl); err != nil {
		p.log.Warn("kafka: the abort of a failed transaction did not complete; the next initialisation of its transactional id or the broker's timeout ends it",
			"transactional_id", id, "error", err)
	}
	// The abort initialised the producer again: never publish with a
	// producer this Publish made (a newer holder may have fenced this
	// process meanwhile, and the abort fenced it back). The bucket's
	// next Publish needs a fence, under the lease.
	t.drop(b)
	perr := p.produceError(ctx, rctx, rec, cause)
	// A deleted (or recreated) topic: the client is dropped above, so
	// the bucket's next one (after a fence) knows the new instance.
	if terr, _ := p.lostTopic(ctx, msg.Topic, perr); terr != nil {
		perr = terr
	}
	return wrapMessage(*msg, perr)
}

// commit commits the transaction; an error means it is not known
// committed, and no transaction is left open.
func (t *TxnPublisher) commit(ctx, rctx context.Context, b *txnBucket, id string) error {
	cl := b.cl
	err := cl.EndTransaction(rctx, kgo.TryCommit)
	if err == nil {
		return nil
	}
	// Not known committed (a fence answering a resent commit whose
	// first answer was lost may follow a commit that applied): report
	// nothing acknowledged. If the commit did apply, the next publish
	// duplicates the whole transaction.
	if fenced(err) {
		t.drop(b) // the newer holder's initialisation aborted it
		return &FencedError{TransactionalID: id, Err: errors.Join(ErrCommitUnknown, err)}
	}
	// A commit not sent or not answered (ctx ended, a connection
	// lost, a coordinator moving) leaves the transaction open at the
	// broker if it did not apply, and an open transaction holds back
	// read_committed consumers of every partition it wrote (other
	// buckets' records on them too) until someone initialises the
	// transactional id again or the broker's timeout (LeaseDuration)
	// aborts it. So abort it now (abort: the producer is initialised
	// again, which aborts whatever is still open and changes nothing if
	// the commit applied).
	if aerr := t.abort(ctx, rctx, cl); aerr != nil {
		t.p.log.Warn("kafka: the abort after an unconfirmed commit did not complete; the next initialisation of its transactional id or the broker's timeout ends the transaction if the commit did not apply",
			"transactional_id", id, "error", aerr)
	}
	t.drop(b)
	return fmt.Errorf("kafka: commit transaction %q: %w: %w", id, ErrCommitUnknown, err)
}

// FenceHolders fences bucket's earlier holders (outbox.HolderFencer): the
// relay calls it after it acquires the bucket's lease and before it reads
// the bucket. It replaces the bucket's client by a new one and initialises
// its producer (InitProducerID), which bumps the transactional id's epoch:
// the broker aborts the open transaction of any producer initialised before
// (a stalled holder's, whatever it appended) and refuses that producer's
// further produce and commit (*FencedError). So a stalled holder's commit
// cannot land after this holder read the bucket (docs/design.md §7.3). A
// new client, because a live one's producer may have been fenced since its
// own initialisation, and kgo reinitialises a healthy producer only when a
// transaction fails. It costs one InitProducerID (and the new client's
// connections) per acquisition: the hold's publishes use that client. ctx
// bounds the initialisation (kgo retries it within ctx, e.g. while the
// coordinator completes the aborted transaction) and the wait for a Publish
// of the bucket in progress in this process (which, aborting, can take
// until its own deadline or AbandonGrace). An error is classified by Class
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED is Fatal: grant Write on the
// transactional id); nothing was published, and the bucket has no client.
//
// kgo's ProducerID returns when ctx is done while its InitProducerID goes
// on, and an initialisation that lands late would fence the bucket's next
// holder (its publish fails as fenced and is tried again; nothing is lost).
// So a failed fence closes its client before it returns: once Close
// returns the client sends nothing more, and no retry of the initialisation
// can go out. A request already on the wire may still reach the
// coordinator; the next holder acquires the lease only after this one's
// expiry, LeaseMargin and MaxClockSkew after the cut-off that cancels the
// fence.
func (t *TxnPublisher) FenceHolders(ctx context.Context, bucket int) error {
	if t.p.closed.Load() {
		return ErrClosed
	}
	b := t.bucket(bucket)
	if err := b.lockCtx(ctx); err != nil {
		return fmt.Errorf("kafka: fence the earlier holders of bucket %d: wait for its publish in progress: %w", bucket, err)
	}
	defer b.unlock()
	t.drop(b)
	id := TransactionalID(t.prefix, bucket)
	cl, err := t.newClient(id)
	if err != nil {
		return err
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close() // waits: no initialisation goes out after this (above)
		return outbox.WithClass(fmt.Errorf("kafka: initialise transactional id %q to fence the bucket's earlier holders: %w", id, err), Class(err))
	}
	b.cl = cl
	return nil
}

// newClient returns a new transactional client for id.
func (t *TxnPublisher) newClient(id string) (*kgo.Client, error) {
	opts := append(append([]kgo.Opt(nil), t.p.kopts...), kgo.TransactionalID(id), kgo.TransactionTimeout(t.txnTTL))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new transactional client %q: %w", id, err)
	}
	return cl, nil
}

// abort ends cl's open transaction with an abort, and returns nil only if
// the broker-side transaction is known to be over. It runs on a context of
// its own, because an abort is most needed when ctx ended in the middle of
// the transaction: until rctx's deadline (the Publish's own, at most
// DeliveryTimeout after it began) but at least AbandonGrace, and, once ctx
// is done, for at most AbandonGrace more (counted from the abort's start if
// ctx was done before it): the relay cancels a publish at its lease's
// cut-off, LeaseMargin before the lease expires. kgo's TryAbort after a
// failed commit or abort only marks the producer id for reloading; the
// reload (InitProducerID, forced here by ProducerID) bumps the epoch, which
// aborts at the coordinator whatever is still open, and changes nothing if
// a commit did apply. A failed abort
// leaves the transaction to the next initialisation of the transactional id
// (the relay's next fence of the bucket, here or in the next holder) or to
// the broker's timeout, LeaseDuration. An abort that comes after a newer
// holder initialised the id aborts that holder's transaction in progress:
// nothing becomes visible, and that holder's publish fails as fenced
// (retriable) and is tried again after its next fence. The producer the
// abort initialised is never used to publish: Publish drops the client
// after it (outbox.HolderFencer: only a fence makes a producer).
func (t *TxnPublisher) abort(ctx, rctx context.Context, cl *kgo.Client) error {
	until := time.Now().Add(AbandonGrace)
	if dl, ok := rctx.Deadline(); ok && dl.After(until) {
		until = dl
	}
	actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), until)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(AbandonGrace, cancel) })
	defer stop()
	err := cl.AbortBufferedRecords(actx)
	if err == nil {
		if err = cl.EndTransaction(actx, kgo.TryAbort); err != nil && actx.Err() == nil {
			err = cl.EndTransaction(actx, kgo.TryAbort) // an unconfirmed abort: this one reloads
		}
	}
	if err == nil {
		_, _, err = cl.ProducerID(actx)
	}
	return err
}

// ErrCommitUnknown is in the chain of a TxnPublisher.Publish error when the
// transaction's commit was sent and not answered as applied: a
// read_committed consumer may or may not see its records. Every other
// Publish error means the transaction was aborted (or never began): none of
// its records is ever visible to a read_committed consumer.
var ErrCommitUnknown = errors.New("kafka: the transaction's commit was sent but not confirmed; it may have applied")

// PublishAlone publishes msg alone (outbox.Isolator) as a transaction of its
// own under its bucket's transactional id, fenced like every other: a stale
// holder gets a *FencedError and its record is never visible to
// read_committed consumers. It is alone in its produce request because the
// bucket's client holds nothing else: its transactions take turns, and
// each one ends only when every record it produced has its answer (and, on
// failure, the abort is done). So a record-level rejection
// (MESSAGE_TOO_LARGE, INVALID_RECORD) is msg's own. Publisher.PublishAlone
// uses a separate non-transactional client instead; here that would
// publish outside the fence and be visible to read_committed consumers at
// once.
func (t *TxnPublisher) PublishAlone(ctx context.Context, msg outbox.Message) error {
	_, err := t.Publish(ctx, []outbox.Message{msg})
	return err
}

func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

func (t *TxnPublisher) bucket(b int) *txnBucket {
	t.mu.Lock()
	defer t.mu.Unlock()
	tb := t.buckets[b]
	if tb == nil {
		tb = &txnBucket{sem: make(chan struct{}, 1)}
		t.buckets[b] = tb
	}
	return tb
}

// drop closes b's client (b locked): the bucket's next Publish answers
// outbox.ErrFenceRequired until FenceHolders initialised a new producer.
func (t *TxnPublisher) drop(b *txnBucket) {
	if b.cl != nil {
		b.cl.Close()
		b.cl = nil
	}
}

// Close closes every bucket's client and the topic-checking client.
func (t *TxnPublisher) Close() {
	t.mu.Lock()
	bs := t.buckets
	t.buckets = make(map[int]*txnBucket)
	t.mu.Unlock()
	for _, b := range bs {
		b.lock()
		t.drop(b)
		b.unlock()
	}
	t.p.Close()
}

// Ping checks that a broker answers (Publisher.Ping).
func (t *TxnPublisher) Ping(ctx context.Context) error { return t.p.Ping(ctx) }

// CheckConfig is Publisher.CheckConfig.
func (t *TxnPublisher) CheckConfig(stored outbox.Config) error { return t.p.CheckConfig(stored) }
