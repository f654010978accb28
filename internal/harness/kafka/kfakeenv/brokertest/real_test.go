package brokertest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/dynakafka/outbox/kafka"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// The tests in this file need a real Apache Kafka broker (SASL/SCRAM and TLS
// listeners, ACLs, the Java client's partitioner); make test runs them in its
// real-broker lane, with OUTBOX_TEST_KAFKA=real.

func realCluster(t *testing.T) *testenv.RealCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Apache Kafka")
	}
	if _, real := testenv.RealKafkaMode(); !real {
		t.Skipf("needs a real Apache Kafka broker: make test runs it in its real-broker lane (%s=real)", testenv.RealKafkaEnv)
	}
	return testenv.RealKafka(t, 1)
}

// TestRealPlacementMatchesJavaPartitioner: for random keys of every length
// up to 40 bytes and several partition counts, the partition the publisher
// chose on the broker, outbox.BucketForKey and kafka-clients' own
// Utils.murmur2 (the Java client's default partitioner) all agree — so a
// Java producer writing the same keys puts them on the same partitions.
func TestRealPlacementMatchesJavaPartitioner(t *testing.T) {
	c := realCluster(t)
	k := c.Kafka()
	rng := rand.New(rand.NewPCG(7, 11))
	const partitions = 12
	topic := newTopic(t, k, partitions, nil)
	p := newPublisher(t, k, kafka.Topics(topic))
	msgs := messages(topic, 600, func(i int) []byte {
		key := make([]byte, i%41) // 0..40 bytes, the empty key included
		for j := range key {
			key[j] = byte(rng.UintN(256))
		}
		return key
	})
	if acked, err := p.Publish(testCtx(t), msgs); acked != len(msgs) || err != nil {
		t.Fatalf("Publish = %d, %v", acked, err)
	}
	onBroker := make(map[string]int32)
	for _, r := range consumeAll(t, k, topic) {
		onBroker[recordID(t, r, outbox.DefaultMessageIDHeader)] = r.Partition
	}

	counts := []int{1, 2, 3, 7, 8, 12, 64, 1000}
	var in strings.Builder
	type query struct {
		key []byte
		n   int
	}
	var qs []query
	for _, m := range msgs {
		qs = append(qs, query{m.Key, partitions})
	}
	for range 400 {
		key := make([]byte, rng.IntN(64))
		for j := range key {
			key[j] = byte(rng.UintN(256))
		}
		qs = append(qs, query{key, counts[rng.IntN(len(counts))]})
	}
	for _, q := range qs {
		fmt.Fprintf(&in, "%d %s\n", q.n, hex.EncodeToString(q.key))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m",
		"-cp", filepath.Join(c.Libs, "*"), filepath.Join("testdata", "Murmur2.java"))
	cmd.Stdin = strings.NewReader(in.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java Murmur2: %v\n%s", err, stderr.String())
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(qs) {
		t.Fatalf("java printed %d partitions for %d keys", len(lines), len(qs))
	}
	for i, q := range qs {
		java, err := strconv.Atoi(lines[i])
		if err != nil {
			t.Fatal(err)
		}
		if got := outbox.BucketForKey(q.key, q.n); got != java {
			t.Errorf("key %x over %d partitions: outbox.BucketForKey %d, the Java client %d", q.key, q.n, got, java)
		}
		if i < len(msgs) {
			if got := onBroker[msgs[i].ID]; int(got) != java {
				t.Errorf("message %d with key %x on partition %d; the Java client would put it on %d", i, q.key, got, java)
			}
		}
	}
}

// TestRealSASLScram: the publisher authenticates with SCRAM-SHA-256 and
// SCRAM-SHA-512 on the broker's SASL_PLAINTEXT listener and is refused with
// a wrong password.
func TestRealSASLScram(t *testing.T) {
	c := realCluster(t)
	k := c.Kafka()
	if err := c.AddSCRAMUser(testCtx(t), "relay", "s3cret"); err != nil {
		t.Fatal(err)
	}
	topic := newTopic(t, k, 1, nil)
	for _, tt := range []struct {
		name    string
		sha256  bool
		pass    string
		wantErr bool
	}{
		{"SHA-256", true, "s3cret", false},
		{"SHA-512", false, "s3cret", false},
		{"wrong password", false, "guess", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			timeout := testTimeout
			if tt.wantErr {
				timeout = 5 * time.Second // kgo retries a refused authentication until the context ends
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			a := scram.Auth{User: "relay", Pass: tt.pass}
			opt := kafka.SASL(a.AsSha512Mechanism())
			if tt.sha256 {
				opt = kafka.SASL(a.AsSha256Mechanism())
			}
			p, err := kafka.NewPublisher(ctx, c.SASL, opt, kafka.Topics(topic))
			if tt.wantErr {
				if err == nil {
					p.Close()
					t.Fatal("NewPublisher authenticated with the wrong password")
				}
				if !errors.Is(err, kerr.SaslAuthenticationFailed) {
					t.Fatalf("NewPublisher with a wrong password: %v; want SASL_AUTHENTICATION_FAILED", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			defer p.Close()
			if acked, err := p.Publish(ctx, messages(topic, 2, sameKey("k"))); acked != 2 || err != nil {
				t.Fatalf("Publish = %d, %v", acked, err)
			}
		})
	}
	if n := len(consumeAll(t, k, topic)); n != 4 {
		t.Fatalf("%d records on the topic, want 4 (2 per mechanism)", n)
	}
}

// TestRealTLS: the publisher talks to the broker's SSL listener, trusting
// the test CA, and refuses a broker it cannot verify.
func TestRealTLS(t *testing.T) {
	c := realCluster(t)
	k := c.Kafka()
	topic := newTopic(t, k, 1, nil)
	p := newPublisher(t, &testenv.KafkaCluster{Brokers: c.TLS}, kafka.TLS(c.TLSConfig()), kafka.Topics(topic))
	if acked, err := p.Publish(testCtx(t), messages(topic, 3, sameKey("k"))); acked != 3 || err != nil {
		t.Fatalf("Publish = %d, %v", acked, err)
	}
	if n := len(consumeAll(t, k, topic)); n != 3 {
		t.Fatalf("%d records on the topic, want 3", n)
	}
	// Without the CA (system roots), the handshake fails.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if p, err := kafka.NewPublisher(ctx, c.TLS, kafka.TLS(nil), kafka.Topics(topic)); err == nil {
		p.Close()
		t.Fatal("NewPublisher trusted a broker certificate signed by an unknown CA")
	}
}

// TestRealAuthorizationFailures: with the StandardAuthorizer, a SCRAM user
// that may describe a topic but not write it gets TOPIC_AUTHORIZATION_FAILED
// from Publish, classified Fatal (not retriable, nothing parked); one that
// may not describe it is refused at NewPublisher with a *TopicError that
// says which permission to grant.
func TestRealAuthorizationFailures(t *testing.T) {
	c := realCluster(t)
	k := c.Kafka()
	ctx := testCtx(t)
	for _, u := range []string{"reader", "stranger"} {
		if err := c.AddSCRAMUser(ctx, u, u+"-pw"); err != nil {
			t.Fatal(err)
		}
	}
	topic := newTopic(t, k, 1, nil)
	adm := newAdmin(t, k)
	acls := kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).
		Allow("User:reader").AllowHosts().Operations(kadm.OpDescribe, kadm.OpDescribeConfigs)
	res, err := adm.CreateACLs(ctx, acls)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create ACL: %v", r.Err)
		}
	}
	// The ACL is in the metadata log; wait until the broker applies it.
	waitFor(t, func() bool {
		d, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).Allow().AllowHosts().Operations(kadm.OpAny))
		return err == nil && len(d) == 1 && len(d[0].Described) > 0
	})

	mech := func(u string) kafka.Option {
		return kafka.SASL(scram.Auth{User: u, Pass: u + "-pw"}.AsSha512Mechanism())
	}

	t.Run("write denied", func(t *testing.T) {
		p := newPublisher(t, &testenv.KafkaCluster{Brokers: c.SASL}, mech("reader"), kafka.Topics(topic))
		acked, err := p.Publish(testCtx(t), messages(topic, 3, sameKey("k")))
		if acked != 0 || !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("Publish = %d, %v; want 0 and TOPIC_AUTHORIZATION_FAILED", acked, err)
		}
		if cl := kafka.Class(err); cl != outbox.Fatal {
			t.Errorf("Class(%v) = %v, want Fatal", err, cl)
		}
		if kafka.IsRetriable(err) {
			t.Errorf("IsRetriable(%v) = true", err)
		}
		if !strings.Contains(err.Error(), "grant Write") {
			t.Errorf("error %q does not say to grant Write", err)
		}
	})
	t.Run("describe denied", func(t *testing.T) {
		_, err := kafka.NewPublisher(testCtx(t), c.SASL, mech("stranger"), kafka.Topics(topic))
		te, ok := errors.AsType[*kafka.TopicError](err)
		if !ok || te.Topic != topic || !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("NewPublisher: %v (%T); want a *kafka.TopicError for %q matching TOPIC_AUTHORIZATION_FAILED", err, err, topic)
		}
	})
	if n := len(consumeAll(t, k, topic)); n != 0 {
		t.Fatalf("%d records on the topic, want none", n)
	}
}

// TestRealCompression: every codec the publisher offers is accepted by the
// broker and the records read back intact.
func TestRealCompression(t *testing.T) {
	c := realCluster(t)
	k := c.Kafka()
	for _, codec := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}, {"snappy", kgo.SnappyCompression()},
		{"gzip", kgo.GzipCompression()}, {"none", kgo.NoCompression()},
	} {
		t.Run(codec.name, func(t *testing.T) {
			topic := newTopic(t, k, 1, nil)
			p := newPublisher(t, k, kafka.Topics(topic), kafka.Compression(codec.codec))
			msgs := messages(topic, 50, sameKey("k"))
			if acked, err := p.Publish(testCtx(t), msgs); acked != len(msgs) || err != nil {
				t.Fatalf("Publish = %d, %v", acked, err)
			}
			recs := consumeAll(t, k, topic)
			if len(recs) != len(msgs) {
				t.Fatalf("%d records, want %d", len(recs), len(msgs))
			}
			for i, r := range recs {
				if !bytes.Equal(r.Value, msgs[i].Value) {
					t.Fatalf("record %d value %q, want %q", i, r.Value, msgs[i].Value)
				}
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
