package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/dynakafka/outbox"
	"github.com/twmb/franz-go/pkg/kgo"
)

// isolation is the second kgo client that PublishAlone produces through, one
// record at a time.
//
// A record produced through the shared client can share its partition's
// record batch with other buckets' records, and kgo fails every record
// buffered for a partition with the error of a batch the broker rejected: a
// healthy record gets MESSAGE_TOO_LARGE because its batch mate is too large.
// The relay parks a record only after PublishAlone rejected it, so
// PublishAlone must put the record in a produce request of its own. A client
// that holds one record at a time does: it has nothing to batch with it.
//
// The client is built on first use, with the shared client's options (TLS,
// SASL, partitioner, batch limit, compression, acks=all, idempotence) and no
// linger (one record has nothing to wait for), and kept for the
// Publisher's life. It has its own producer id (one InitProducerID on first
// use) and its own metadata (loaded for a topic the first time a record goes
// to it). It partitions a key like the shared client as long as both see the
// same partition count: while partitions are being added they may disagree
// for up to a metadata refresh, as any two producers do.
//
// A record abandoned by PublishAlone (the context ended before the broker
// answered) stays in the client until the broker answers. The next
// PublishAlone must not share a request with it, so it closes that client
// (the abandoned record may still be written, as documented for
// ErrAbandoned) and builds a fresh one. It does the same after a topic was
// lost (see Publisher.replace).
type isolation struct {
	turn chan struct{} // one PublishAlone at a time
	mu   sync.Mutex    // guards pc and stale against Close
	pc   *prodClient
	// stale: pc knows a topic that was lost; the next PublishAlone
	// replaces it.
	stale bool
}

func newIsolation() isolation { return isolation{turn: make(chan struct{}, 1)} }

// PublishAlone produces msg alone in a produce request (see outbox.Isolator)
// and returns nil once Kafka acknowledged it, or the error Publish would
// return for it: a record-level rejection (MESSAGE_TOO_LARGE,
// INVALID_RECORD, ...) is then msg's own. It uses a second kgo client,
// created on first use, that never holds more than one record; concurrent
// calls take turns. Like Publish it returns at the latest AbandonGrace after
// ctx is done or DeliveryTimeout has passed.
func (p *Publisher) PublishAlone(ctx context.Context, msg outbox.Message) error {
	if p.closed.Load() {
		return wrapMessage(msg, ErrClosed)
	}
	select {
	case p.iso.turn <- struct{}{}:
	case <-ctx.Done():
		return wrapMessage(msg, fmt.Errorf("kafka: not produced: waiting for another record published alone: %w", ctx.Err()))
	}
	defer func() { <-p.iso.turn }()
	pc, err := p.isolated()
	if err != nil {
		return wrapMessage(msg, err)
	}
	_, err = p.publish(ctx, pc, []outbox.Message{msg}, true)
	return err
}

// isolated returns the isolation client, building it first if there is none
// or if the one there still holds a record an earlier call abandoned or
// knows a lost topic. The caller holds the turn.
func (p *Publisher) isolated() (*prodClient, error) {
	p.iso.mu.Lock()
	defer p.iso.mu.Unlock()
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if p.iso.pc != nil && (p.iso.stale || p.iso.pc.unanswered.Load() > 0) {
		old := p.iso.pc
		p.iso.pc = nil
		p.log.Debug("kafka: replacing the client for records published alone", "lost_topic", p.iso.stale,
			"unanswered", old.unanswered.Load())
		go old.cl.Close() // fails an abandoned record; Close waits for nothing else
	}
	p.iso.stale = false
	if p.iso.pc == nil {
		cl, err := kgo.NewClient(append(p.kopts[:len(p.kopts):len(p.kopts)], kgo.ProducerLinger(0))...)
		if err != nil {
			return nil, fmt.Errorf("kafka: client for records published alone: %w", err)
		}
		p.iso.pc = &prodClient{cl: cl}
	}
	return p.iso.pc, nil
}

// dropIsolation has the next PublishAlone replace the isolation client,
// which knows topic, lost (see Publisher.replace). It never touches the
// client in use: PublishAlone calls take turns.
func (p *Publisher) dropIsolation(topic string) {
	p.iso.mu.Lock()
	defer p.iso.mu.Unlock()
	if p.iso.pc != nil && !p.iso.stale {
		p.iso.stale = true
		p.log.Debug("kafka: the client for records published alone will be replaced", "lost_topic", topic)
	}
}

// closeIsolation closes the isolation client, if any.
func (p *Publisher) closeIsolation() {
	p.iso.mu.Lock()
	defer p.iso.mu.Unlock()
	if p.iso.pc != nil {
		p.iso.pc.cl.Close()
		p.iso.pc = nil
	}
}
