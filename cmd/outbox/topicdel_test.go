package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/testenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/store/dynamo"
)

// TestTopicDeleted: a topic deleted under a running relay (Relay.Run, the
// Kafka publisher) while messages for it keep coming stops only its bucket,
// with the reason in outbox status; the relay's sweeps and heartbeat go on
// and the other bucket keeps publishing; the bucket's lease is free between
// the relay's attempts, so outbox park and outbox drain work; once the topic
// is created again the same relay, not restarted, publishes to it, and the
// parked message is replayed: nothing written after the deletion is lost.
// It runs on kfake and, with OUTBOX_TEST_KAFKA=real, on Apache Kafka (make
// test's real-broker lane).
func TestTopicDeleted(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.now = time.Now()
	k := testenv.Kafka(t)
	lane := "kfake"
	if k.Real != nil {
		lane = "real"
	}
	gone, other := testenv.Name(t, "gone"), testenv.Name(t, "other")
	testenv.CreateTopic(t, k, gone, 1)
	testenv.CreateTopic(t, k, other, 1)
	c.env["KAFKA_AUTH"], c.env["KAFKA_BOOTSTRAP_SERVERS"] = "none", strings.Join(k.Brokers, ",")
	c.step(exitOK, "init", "--buckets", "2")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // a hang guard
	defer cancel()
	st, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(ctx, k.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const relayID = "relay-under-test"
	relay, err := outbox.NewRelay(ctx, st, pub, outbox.RelayID(relayID), outbox.PollInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- relay.Run(rctx) }()
	defer func() {
		stopRelay()
		if err := <-ran; !errors.Is(err, context.Canceled) {
			t.Errorf("Relay.Run returned %v; want it to run until cancelled", err)
		}
	}()

	w, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	keyOf := func(bucket int) []byte {
		for n := 0; ; n++ {
			if key := fmt.Appendf(nil, "key-%d", n); outbox.BucketForKey(key, 2) == bucket {
				return key
			}
		}
	}
	topicKey := map[string][]byte{gone: keyOf(0), other: keyOf(1)}
	n := 0
	write := func(topic string) string {
		t.Helper()
		n++
		m := outbox.Message{ID: id(n), Topic: topic, Key: topicKey[topic], Value: []byte("v")}
		if _, err := w.Write(ctx, nil, m); err != nil {
			t.Fatalf("write %d (topic %s): %v", n, topic, err)
		}
		return m.ID
	}
	// eventually retries f until it holds, a minute at most (a backstop,
	// not a budget).
	eventually := func(f func() bool) bool {
		for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if f() {
				return true
			}
			if time.Now().After(end) {
				return false
			}
		}
	}
	// cliRun runs a command that needs the bucket's lease, again while the
	// relay holds it for one of its attempts (exit 4), and returns its exit
	// code (the last one).
	cliRun := func(args ...string) int {
		code, tries, stdout, stderr := exitNotDrained, 0, "", ""
		eventually(func() bool {
			tries++
			c.now = time.Now() // the CLI's clock: its lease lasts from now, beside the relay's
			code, stdout, stderr = c.run(args...)
			return code != exitNotDrained
		})
		fmt.Fprintf(&c.out, "$ outbox %s\n[exit %d after %d tries]\n%s%s\n", strings.Join(args, " "), code, tries, stdout, stderr)
		return code
	}

	before := []string{write(gone), write(other)}
	if got := append(consumeIDs(t, k, gone, 1), consumeIDs(t, k, other, 1)...); !slices.Equal(got, before) {
		t.Fatalf("before the deletion the relay published %v; want %v", got, before)
	}

	testenv.DeleteTopic(t, k, gone)
	parkedID, resumedID := write(gone), write(gone)
	after := []string{write(other)}

	// The bucket stops with the reason, within the relay's sweeps.
	var status string
	reasonShown := eventually(func() bool {
		c.now = time.Now()
		_, status, _ = c.run("status")
		row := ""
		for _, l := range strings.Split(status, "\n") {
			if strings.HasPrefix(l, "0 ") {
				row = l
			}
		}
		return strings.Contains(status, "REASON") && strings.Contains(row, "stopped at 2") &&
			strings.Contains(row, gone) && strings.Contains(row, "does not exist")
	})
	if !reasonShown {
		t.Errorf("status does not say why bucket 0 is stopped:\n%s", status)
	}
	// The sweeps and the heartbeat go on, and so does the other bucket.
	stuckAt := time.Now()
	heartbeat := eventually(func() bool {
		live, err := st.LiveRelays(ctx, time.Now(), time.Second)
		return err == nil && slices.Contains(live, relayID) && time.Since(stuckAt) > time.Second
	})
	if !heartbeat {
		t.Errorf("no heartbeat of %s after bucket 0 stopped", relayID)
	}
	after = append(after, write(other))
	othersPublished := heartbeat && slices.Equal(consumeIDs(t, k, other, 3)[1:], after)
	if !othersPublished {
		t.Errorf("bucket 1 did not publish %v while bucket 0 was stopped", after)
	}

	// The lease is free between the relay's attempts: park moves the head
	// aside; drain runs and stops at the next message, still for no topic.
	parkOK := cliRun("park", "--bucket", "0", "--head", "--reason", "topic deleted") == exitOK
	if !parkOK {
		t.Errorf("outbox park --head did not park bucket 0's head")
	}
	if code := cliRun("drain", "0"); code != exitFailed {
		t.Errorf("outbox drain 0 with the topic still missing: exit %d, want %d (it stops at the missing topic)", code, exitFailed)
	}

	// The topic is created again: the same relay publishes to it.
	testenv.CreateTopic(t, k, gone, 1)
	resumed := consumeIDs(t, k, gone, 1)
	recreatedResumed := slices.Equal(resumed, []string{resumedID})
	if !recreatedResumed {
		t.Errorf("the recreated topic %s holds %v; want %v, published by the running relay", gone, resumed, resumedID)
	}
	c.now = time.Now()
	c.step(exitOK, "replay", "--bucket", "0", "--seq", "2")
	if code := cliRun("drain", "0"); code != exitOK {
		t.Errorf("outbox drain 0 after the topic was recreated: exit %d, want %d", code, exitOK)
	}
	published := map[string]bool{}
	for _, s := range append(consumeIDs(t, k, gone, 2), consumeIDs(t, k, other, 3)...) {
		published[s] = true
	}
	lost := 0
	for _, s := range append([]string{parkedID, resumedID}, after...) {
		if !published[s] {
			lost++
		}
	}
	if lost != 0 {
		t.Errorf("%d of the messages written after the deletion were never published", lost)
	}
	fmt.Printf("topic-deleted: lane=%s reason_shown=%d others_published=%d park_ok=%d recreated_resumed=%d lost=%d\n",
		lane, b2i(reasonShown), b2i(othersPublished), b2i(parkOK), b2i(recreatedResumed), lost)
	if t.Failed() {
		t.Logf("transcript:\n%s", c.normalise(c.out.String()))
	}
}
