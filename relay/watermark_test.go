package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// modeStore is a memory store whose config item says mode (the memory store
// has no mode of its own).
type modeStore struct {
	*memory.Store
	mode outbox.Mode
}

func (s modeStore) Config(ctx context.Context) (outbox.Config, error) {
	c, err := s.Store.Config(ctx)
	c.Mode = s.mode
	return c, err
}

// gatedPublisher acknowledges everything, counts publishes per message id,
// and holds the publish of a message whose sequence is hold (0: none) until
// release is closed.
type gatedPublisher struct {
	mu      sync.Mutex
	sent    map[string]int
	hold    int64
	held    chan struct{} // closed when the held publish started
	release chan struct{}
	once    sync.Once
}

func (p *gatedPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	for _, m := range msgs {
		if m.Sequence == p.hold {
			p.once.Do(func() { close(p.held) })
			<-p.release
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.sent[m.ID]++
	}
	return len(msgs), nil
}

// TestResumedDrainRacingAnAcquirer: relay a released bucket 0 at head 3 and
// resumes it (no lease write) to publish 4..6; relay b acquires the bucket
// while a's publish is in flight, and waits ResumeWindow before reading. In
// DeleteMode a's tombstones mark 4..6 decided, so b publishes nothing again.
//
// In WatermarkMode nothing marks them: a's head update after its resumed
// drain is refused (b holds the bucket) and b reads from head 3, publishing
// 4..6 a second time. That is the engine's known gap in watermark mode (the
// e2e test sees it as duplicates between two relays), so that case is
// skipped until the engine closes it; remove the skip to check a fix.
func TestResumedDrainRacingAnAcquirer(t *testing.T) {
	for _, mode := range []outbox.Mode{outbox.DeleteMode, outbox.WatermarkMode} {
		t.Run(mode.String(), func(t *testing.T) {
			if mode == outbox.WatermarkMode {
				t.Skip("known engine gap: a resumed watermark drain's progress is lost when another relay acquires the bucket meanwhile")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			mem := memory.New(1)
			st := modeStore{mem, mode}
			put := func(from, to int64) {
				for seq := from; seq <= to; seq++ {
					if err := mem.Put(outbox.Message{ID: outbox.NewID(), Sequence: seq, Topic: "t", Key: []byte("k"), Value: []byte("v")}); err != nil {
						t.Fatal(err)
					}
				}
			}
			pub := &gatedPublisher{sent: map[string]int{}, held: make(chan struct{}), release: make(chan struct{})}
			opts := []relay.Option{relay.ResumeWindow(2 * time.Second), relay.LeaseMargin(500 * time.Millisecond), relay.HolderWait(0)}
			a, err := relay.New(ctx, st, pub, append(opts, relay.RelayID("a"))...)
			if err != nil {
				t.Fatal(err)
			}
			b, err := relay.New(ctx, st, pub, append(opts, relay.RelayID("b"))...)
			if err != nil {
				t.Fatal(err)
			}
			put(1, 3)
			if _, err := a.DrainBucket(ctx, 0); err != nil {
				t.Fatal(err)
			}
			put(4, 6)
			pub.hold = 4
			aDone := make(chan relay.DrainStats)
			go func() {
				s, _ := a.DrainBucket(ctx, 0) // resumes: no lease write
				aDone <- s
			}()
			<-pub.held
			bDone := make(chan relay.DrainStats)
			go func() {
				s, _ := b.DrainBucket(ctx, 0) // acquires, waits ResumeWindow, reads
				bDone <- s
			}()
			for mem.Lease(0).Owner != "b" {
				time.Sleep(5 * time.Millisecond)
			}
			close(pub.release)
			sa, sb := <-aDone, <-bDone
			if !sa.Resumed || !sb.Acquired {
				t.Fatalf("a resumed %v, b acquired %v: the race was not set up", sa.Resumed, sb.Acquired)
			}
			pub.mu.Lock()
			defer pub.mu.Unlock()
			for id, n := range pub.sent {
				if n != 1 {
					t.Errorf("message %s published %d times", id, n)
				}
			}
		})
	}
}

// TestWatermarkHeldDrainReleasesWithItsHead (issue 28): a held drain in
// WatermarkMode whose last batch Kafka acknowledged whole writes that
// batch's head with its release — two lease writes for a one-batch drain
// (acquire, release), where it wrote the head and then released (three,
// two of them in a row on the drain's path: a hand-over of a busy bucket
// paid for both). The head is still stored: the next drain starts there.
func TestWatermarkHeldDrainReleasesWithItsHead(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	s := &gateStore{countingStore: &countingStore{Store: modeStore{mem, outbox.WatermarkMode}, writes: map[string]int{}}}
	pub := newOverlapPublisher()
	r := newRelay(t, s, pub, relay.RelayID("a"), relay.ResumeReleased(false))
	fill(t, mem, 0, 1, 2, 3)
	if st, err := r.DrainBucket(ctx, 0); err != nil || !st.Acquired {
		t.Fatalf("drain: acquired %v, %v", st.Acquired, err)
	}
	if n := s.get("Update"); n != 0 {
		t.Errorf("head writes before the release: %d, want 0 (the release carries the head)", n)
	}
	if h := mem.Lease(0).Head; h != 3 {
		t.Fatalf("stored head %d, want 3", h)
	}
	fill(t, mem, 0, 4)
	if _, err := r.DrainBucket(ctx, 0); err != nil {
		t.Fatal(err)
	}
	pub.checkOnce(t, []int64{1, 2, 3, 4})
}
