package integration_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

// TestPythonWriterUnit runs the reference Python writer's own tests
// (clients/python/tests: murmur2 and buckets against the shared vectors, the
// header encoding, the config item, the write algorithm on a fake client,
// the schemas); they need no DynamoDB.
func TestPythonWriterUnit(t *testing.T) {
	t.Parallel()
	py := testenv.Python(t)
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Dir = filepath.Join(testenv.RepoRoot(), "clients", "python")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest clients/python/tests: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("pytest: %s", lines[len(lines)-1])
}

// TestPythonMurmur2Random compares the Python writer's murmur2 and bucket
// function with Go's on 2,000 seeded random keys of 0..64 bytes (all tail
// lengths, all byte values) and random ids, beyond the committed vectors.
func TestPythonMurmur2Random(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(19, 4))
	type sample struct {
		KeyHex  *string `json:"key_hex"`
		ID      string  `json:"id"`
		Murmur2 uint32  `json:"murmur2"`
		Buckets []int   `json:"buckets"` // for bucket counts 1, 7, 8, 1000, 4096
	}
	counts := []int{1, 7, 8, 1000, 4096}
	var samples []sample
	for i := range 2000 {
		key := make([]byte, rng.IntN(65))
		for j := range key {
			key[j] = byte(rng.UintN(256))
		}
		var idBytes [16]byte
		for j := range idBytes {
			idBytes[j] = byte(rng.UintN(256))
		}
		m := outbox.Message{ID: uuid.UUID(idBytes).String()}
		s := sample{ID: m.ID}
		if i%5 != 0 { // every fifth keyless
			h := hex.EncodeToString(key)
			s.KeyHex, m.Key = &h, key
			s.Murmur2 = outbox.Murmur2(key)
		} else {
			s.Murmur2 = outbox.Murmur2(idBytes[:])
		}
		for _, n := range counts {
			b, err := outbox.BucketFor(m, n)
			if err != nil {
				t.Fatal(err)
			}
			s.Buckets = append(s.Buckets, b)
		}
		samples = append(samples, s)
	}
	data, _ := json.Marshal(samples)
	path := filepath.Join(t.TempDir(), "samples.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	const check = `
import json, sys, uuid
from outbox_writer import contract
bad = 0
for s in json.load(open(sys.argv[1])):
    key = None if s["key_hex"] is None else bytes.fromhex(s["key_hex"])
    h = contract.murmur2(key if key is not None else uuid.UUID(s["id"]).bytes)
    got = [contract.bucket_for(s["id"], key, None, n) for n in (1, 7, 8, 1000, 4096)]
    if h != s["murmur2"] or got != s["buckets"]:
        bad += 1
        print("mismatch", s, h, got)
print("samples", len(json.load(open(sys.argv[1]))), "mismatches", bad)
sys.exit(1 if bad else 0)
`
	cmd := exec.Command(testenv.Python(t), "-c", check, path)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(testenv.RepoRoot(), "clients", "python"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Python bucket function differs from Go's: %v\n%s", err, out)
	}
}

// pyKey is one kind of message both writers write: keyed, the empty key,
// keyless (bucketed by the id), and an explicit partition.
type pyKey struct {
	name      string
	key       []byte // nil: keyless
	partition *int32
}

var pyKeys = []pyKey{
	{name: "order-1", key: []byte("order-1")},
	{name: "order-2", key: []byte("order-2")},
	{name: "customer/42", key: []byte("customer/42")},
	{name: "empty", key: []byte{}},
	{name: "keyless"},
	{name: "pinned", key: []byte("order-1"), partition: outbox.PartitionOf(5)},
}

func (k pyKey) message(label string, seq int, id string) map[string]any {
	m := map[string]any{"topic": "", "value": fmt.Sprintf("%s:%s:%d", label, k.name, seq),
		"headers": []map[string]any{{"key": "source", "value": label}, {"key": "nil-value", "value": nil}}}
	if k.key != nil {
		m["key_b64"] = base64.StdEncoding.EncodeToString(k.key)
	}
	if k.partition != nil {
		m["partition"] = *k.partition
	}
	if id != "" {
		m["id"] = id
	}
	return m
}

// TestPythonWriter runs the reference Python writer (clients/python) beside
// the Go writer on one outbox in DynamoDB Local, drains it with the Go relay
// into kfake, and checks the contract (docs/contract.md) from both sides:
// the Python writer's messages are published in order per key, in the
// buckets the Go writer and the shared vectors give; a transaction that
// failed after its reservation (a business condition, and a writer that
// stopped between reservation and commit) is fenced and never published; a
// put onto a fenced number reserves again; the writer refuses config items
// it does not understand and writes nothing; and every item both writers,
// and the relay, left validates against schema/ (schema/validate.py).
func TestPythonWriter(t *testing.T) {
	t.Parallel() // mostly waiting on processes and DynamoDB Local: overlaps the other long tests
	const buckets, rounds = 8, 3
	e := newEnv(t, buckets)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	topic := e.topic
	type written struct {
		id, value string
		key       pyKey
		bucket    int
		seq       int64
		python    bool
	}
	var all []written

	// 1. The Go writer and the Python writer, interleaved per round, so that
	// each key's order mixes both.
	for round := range rounds {
		for _, k := range pyKeys {
			m := outbox.Message{Topic: topic, Key: k.key, Partition: k.partition, Value: []byte(fmt.Sprintf("go:%s:%d", k.name, round)),
				Headers: []outbox.Header{{Key: "source", Value: []byte("go")}}}
			res, err := e.writer.Write(ctx, nil, m)
			if err != nil {
				t.Fatal(err)
			}
			w := res.Messages[0]
			all = append(all, written{w.ID, string(w.Value), k, w.Bucket, w.Sequence, false})
		}
		var txs []testenv.PythonTx
		for _, k := range pyKeys {
			msg := k.message("py", round, "")
			msg["topic"] = topic
			txs = append(txs, testenv.PythonTx{Messages: []any{msg}})
		}
		// Two messages of one key in one transaction, with a business item.
		two := []any{pyKeys[0].message("py", 100+2*round, ""), pyKeys[0].message("py", 101+2*round, "")}
		for _, m := range two {
			m.(map[string]any)["topic"] = topic
		}
		txs = append(txs, testenv.PythonTx{Messages: two, Items: []any{map[string]any{"Put": map[string]any{
			"TableName": e.business, "Item": map[string]any{"id": map[string]any{"S": fmt.Sprintf("py-agg-%d", round)}, "version": map[string]any{"N": "1"}},
			"ConditionExpression": "attribute_not_exists(id)"}}}})
		results, code := testenv.RunPythonWriter(ctx, t, e.dynamo, e.tables.Messages, e.tables.Control, txs)
		if code != 0 || len(results) != len(txs) {
			t.Fatalf("python writer: exit %d, %d results for %d transactions: %+v", code, len(results), len(txs), results)
		}
		for i, r := range results {
			for j, m := range r.Messages {
				tx := txs[i].Messages[j].(map[string]any)
				k := pyKeys[0]
				if i < len(pyKeys) {
					k = pyKeys[i]
				}
				all = append(all, written{m.ID, tx["value"].(string), k, m.Bucket, m.Sequence, true})
			}
		}
	}

	// 2. A put onto a number a relay fenced: the writer reserves again.
	b1, _ := outbox.BucketFor(outbox.Message{Key: []byte("order-1")}, buckets)
	last, err := sequence.Last(ctx, e.dynamo.Client, e.tables.Control, b1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Fence(ctx, b1, last+1, time.Now()); err != nil {
		t.Fatal(err)
	}
	retry := pyKeys[0].message("py", 200, "")

	// 3. In the same run, transactions that fail after their reservation: a
	// business condition fails (the writer fences its numbers at once), and
	// a writer stops between reservation and commit (the relay fences the
	// gap after its GapTimeout, once a later message of the bucket is
	// committed).
	failedID, abandonedID := outbox.NewID(), outbox.NewID()
	failed := pyKeys[1].message("py", 300, failedID)
	abandoned := pyKeys[2].message("py", 301, abandonedID)
	after := pyKeys[2].message("py", 302, "")
	for _, m := range []map[string]any{retry, failed, abandoned, after} {
		m["topic"] = topic
	}
	res, code := testenv.RunPythonWriter(ctx, t, e.dynamo, e.tables.Messages, e.tables.Control, []testenv.PythonTx{
		{Messages: []any{retry}},
		{Messages: []any{failed}, Items: []any{map[string]any{"ConditionCheck": map[string]any{
			"TableName": e.business, "Key": map[string]any{"id": map[string]any{"S": "no-such-order"}}, "ConditionExpression": "attribute_exists(id)"}}}},
		{Messages: []any{abandoned}, AbandonAfterReserve: true},
		{Messages: []any{after}},
	})
	if len(res) != 4 {
		t.Fatalf("python writer: exit %d, %d results for 4 transactions: %+v", code, len(res), res)
	}
	if !res[0].OK || res[0].Reservations != 2 || res[0].Messages[0].Sequence <= last+1 {
		t.Fatalf("put onto a fenced number: %+v; want committed after a second reservation above %d", res[0], last+1)
	}
	reservedAgain := res[0].Reservations - 1
	all = append(all, written{res[0].Messages[0].ID, retry["value"].(string), pyKeys[0], res[0].Messages[0].Bucket, res[0].Messages[0].Sequence, true})
	res = res[1:]
	if res[0].Error != "Outbox.ConditionFailed" || len(res[0].Released) != 1 || res[1].Error != "Abandoned" || len(res[1].Reserved) != 1 || !res[2].OK {
		t.Fatalf("failed transactions: exit %d, %+v", code, res)
	}
	never := map[string][2]int64{failedID: res[0].Released[0], abandonedID: res[1].Reserved[0]}
	all = append(all, written{res[2].Messages[0].ID, after["value"].(string), pyKeys[2], res[2].Messages[0].Bucket, res[2].Messages[0].Sequence, true})

	// 4. Config items the writer does not understand: refused, nothing written.
	refused := 0
	other := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := dynamo.CreateTables(ctx, e.dynamo.Client, other, dynamo.BucketCount(buckets)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		set  map[string]types.AttributeValue
	}{
		{"a newer config version", map[string]types.AttributeValue{"v": num(5)}}, // the writers understand 1..4
		{"an unknown mode", map[string]types.AttributeValue{"v": num(2), "md": &types.AttributeValueMemberS{Value: "compact"}, "rt": num(86400)}},
	} {
		item := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "config"}, "sk": &types.AttributeValueMemberS{Value: "config"}, "bc": num(buckets)}
		for k, v := range c.set {
			item[k] = v
		}
		if _, err := e.dynamo.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(other.Control), Item: item}); err != nil {
			t.Fatal(err)
		}
		msg := pyKeys[0].message("py", 400, "")
		msg["topic"] = topic
		res, code := testenv.RunPythonWriter(ctx, t, e.dynamo, other.Messages, other.Control, []testenv.PythonTx{{Messages: []any{msg}}})
		if code != 3 || len(res) != 1 || res[0].Error != "Outbox.Config" || !res[0].Unknown {
			t.Fatalf("%s: exit %d, %+v; want Outbox.Config (unknown)", c.name, code, res)
		}
		if n := len(scanItems(ctx, t, e.dynamo.Client, other.Messages)); n != 0 {
			t.Fatalf("%s: the refused writer left %d items in the messages table", c.name, n)
		}
		for _, it := range scanItems(ctx, t, e.dynamo.Client, other.Control) {
			if sk, _ := it["sk"].(*types.AttributeValueMemberS); sk != nil && sk.Value == "seq" {
				t.Fatalf("%s: the refused writer reserved a sequence number", c.name)
			}
		}
		refused++
	}

	// 4b. A watermark-mode outbox that lists its topics (tp): both writers
	// put the TTL on every message (validate.py requires x exactly in
	// watermark mode, and every topic in the list), and the Python writer
	// refuses a topic outside the list the Go side configured, writing
	// nothing.
	wm := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := dynamo.CreateTables(ctx, e.dynamo.Client, wm, dynamo.BucketCount(buckets), dynamo.WithMode(outbox.WatermarkMode), dynamo.Topics(topic, "other-topic")); err != nil {
		t.Fatal(err)
	}
	gw, err := dynamo.NewWriter(ctx, e.dynamo.Client, wm)
	if err != nil {
		t.Fatal(err)
	}
	var wmTxs []testenv.PythonTx
	for _, k := range pyKeys {
		if _, err := gw.Write(ctx, nil, outbox.Message{Topic: topic, Key: k.key, Partition: k.partition, Value: []byte("go-wm")}); err != nil {
			t.Fatal(err)
		}
		msg := k.message("py-wm", 0, "")
		msg["topic"] = topic
		wmTxs = append(wmTxs, testenv.PythonTx{Messages: []any{msg}})
	}
	if res, code := testenv.RunPythonWriter(ctx, t, e.dynamo, wm.Messages, wm.Control, wmTxs); code != 0 || len(res) != len(wmTxs) {
		t.Fatalf("python writer, watermark mode: exit %d, %+v", code, res)
	}
	before := len(scanItems(ctx, t, e.dynamo.Client, wm.Messages)) + len(scanItems(ctx, t, e.dynamo.Client, wm.Control))
	unlisted := pyKeys[0].message("py-wm", 1, "")
	unlisted["topic"] = "not-" + topic
	if res, code := testenv.RunPythonWriter(ctx, t, e.dynamo, wm.Messages, wm.Control, []testenv.PythonTx{{Messages: []any{unlisted}}}); code != 8 || len(res) != 1 ||
		res[0].Error != "Outbox.Validation" || !strings.Contains(res[0].Message, "not-"+topic) {
		t.Fatalf("python writer, a topic outside the outbox's list: exit %d, %+v; want Outbox.Validation naming the topic", code, res)
	}
	if after := len(scanItems(ctx, t, e.dynamo.Client, wm.Messages)) + len(scanItems(ctx, t, e.dynamo.Client, wm.Control)); after != before {
		t.Fatalf("python writer, a topic outside the outbox's list: %d items before, %d after; want nothing written", before, after)
	}
	schemaCheck(ctx, t, e.dynamo.Client, wm, "watermark-topics")

	// 5. The items both writers wrote validate against the schemas, and the
	// failed transaction's number already holds the writer's fence.
	schemaCheck(ctx, t, e.dynamo.Client, e.tables, "before-relay")
	if it := getMessageItem(ctx, t, e, never[failedID]); it == nil || it["f"] == nil {
		t.Fatalf("the condition-failed transaction's number %v holds %v, want the writer's fence", never[failedID], it)
	}

	// 6. The Go relay drains every bucket to kfake.
	var (
		mu     sync.Mutex
		byID   = map[string]*kgo.Record{}
		order  = map[string][]string{} // key name -> values in consumed order
		dups   []string                // the bucket header of each republished record
		valKey = map[string]pyKey{}
	)
	for _, w := range all {
		valKey[w.value] = w.key
	}
	cctx, cstop := context.WithCancel(ctx)
	defer cstop()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		defer cl.Close()
		for cctx.Err() == nil {
			cl.PollFetches(cctx).EachRecord(func(r *kgo.Record) {
				mu.Lock()
				defer mu.Unlock()
				id := header(r, outbox.DefaultMessageIDHeader)
				if byID[id] != nil {
					dups = append(dups, header(r, outbox.DefaultBucketHeader))
					return
				}
				byID[id] = r
				k := valKey[string(r.Value)]
				order[k.name] = append(order[k.name], string(r.Value))
			})
		}
	}()
	rl := e.relay(t, relay.GapTimeout(time.Second), relay.GapPollInterval(20*time.Millisecond))
	stopped := map[string]error{} // bucket -> the error a drain of it stopped with (it may republish after that)
	for b := range buckets {
		for {
			dctx, dcancel := context.WithTimeout(ctx, 2*time.Minute)
			_, err := rl.DrainBucket(dctx, b)
			dcancel()
			if err == nil {
				break
			}
			if !errors.Is(err, outbox.ErrGapPending) && !errors.Is(err, outbox.ErrDeadline) || ctx.Err() != nil {
				t.Fatalf("drain bucket %d: %v", b, err)
			}
			stopped[strconv.Itoa(b)] = err
		}
	}
	for {
		mu.Lock()
		n := len(byID)
		mu.Unlock()
		if n >= len(all) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cstop()
	<-consumed

	// 7. The checks.
	mu.Lock()
	defer mu.Unlock()
	pyMessages, inOrder, mismatches, fencedUnpublished, goMessages := 0, 0, 0, 0, 0
	position := map[string]int{} // value -> index in its key's consumed order
	for _, vs := range order {
		for i, v := range vs {
			position[v] = i
		}
	}
	lastPos := map[string]int{}
	for _, w := range all { // in write order
		r := byID[w.id]
		if !w.python {
			goMessages++
		}
		m := outbox.Message{ID: w.id, Key: w.key.key, Partition: w.key.partition}
		want, _ := outbox.BucketFor(m, buckets)
		if r == nil {
			t.Errorf("message %s (%s) was never published", w.id, w.value)
			continue
		}
		if w.bucket != want || header(r, outbox.DefaultBucketHeader) != strconv.Itoa(want) || header(r, outbox.DefaultSequenceHeader) != strconv.FormatInt(w.seq, 10) {
			mismatches++
			t.Errorf("message %s (%s): written to bucket %d seq %d, published with bucket %q seq %q; the bucket function gives %d",
				w.id, w.value, w.bucket, w.seq, header(r, outbox.DefaultBucketHeader), header(r, outbox.DefaultSequenceHeader), want)
		}
		ok := string(r.Value) == w.value && recordMatches(t, r, w.key.key, w.python)
		if w.key.key != nil { // keyless messages are promised no order
			p, seen := position[w.value]
			if prev, had := lastPos[w.key.name]; !seen || had && p <= prev {
				ok = false
				t.Errorf("message %s (%s) of key %s is out of its write order: consumed %v", w.id, w.value, w.key.name, order[w.key.name])
			}
			lastPos[w.key.name] = p
		}
		if w.python {
			pyMessages++
			if ok {
				inOrder++
			}
		}
	}
	for id, pos := range never {
		it := getMessageItem(ctx, t, e, pos)
		switch {
		case byID[id] != nil:
			t.Errorf("message %s of a failed transaction was published", id)
		case it == nil || it["f"] == nil:
			t.Errorf("the failed transaction's number %v holds %v after the drain, want a fence", pos, it)
		default:
			fencedUnpublished++
		}
	}
	// One relay and no faults: a record is published twice only after a
	// drain of its bucket stopped early (a deadline, or waiting on the
	// abandoned reservation's gap) and the next drain republished what the
	// stopped one had not recorded as published.
	for _, b := range dups {
		if stopped[b] == nil {
			t.Errorf("a record of bucket %s was published twice, and no drain of that bucket stopped early", b)
		}
	}

	// 8. The relay's fences and tombstones validate too.
	schemaCheck(ctx, t, e.dynamo.Client, e.tables, "after-relay")
	fmt.Printf("python-writer: messages=%d published_in_order=%d placement_mismatches=%d fenced_unpublished=%d refused_unknown_config=%d reserved_again_after_fence=%d go_messages=%d republished=%d\n",
		pyMessages, inOrder, mismatches, fencedUnpublished, refused, reservedAgain, goMessages, len(dups))
	if inOrder != pyMessages || fencedUnpublished != len(never) || refused != 2 || reservedAgain != 1 {
		t.Fatal("python-writer: the contract does not hold (see the errors above)")
	}
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func getMessageItem(ctx context.Context, t *testing.T, e *env, pos [2]int64) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.dynamo.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.tables.Messages), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"b": num(pos[0]), "s": num(pos[1])}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func scanItems(ctx context.Context, t *testing.T, client *dynamodb.Client, table string) []map[string]types.AttributeValue {
	t.Helper()
	var items []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, out.Items...)
	}
	return items
}

// schemaCheck validates every item of the two tables, as stored, with
// schema/validate.py.
func schemaCheck(ctx context.Context, t *testing.T, client *dynamodb.Client, tables dynamo.Tables, label string) {
	t.Helper()
	var rows []testenv.SchemaRow
	for _, tb := range []struct{ name, table string }{{"messages", tables.Messages}, {"control", tables.Control}} {
		for _, it := range scanItems(ctx, t, client, tb.table) {
			rows = append(rows, testenv.SchemaRow{Table: tb.name, Item: it})
		}
	}
	testenv.ValidateSchemas(ctx, t, label, false, rows)
}

// recordMatches reports whether the record carries the key as written
// (keyless stays null, the empty key stays empty) and, for the Python
// writer's messages, its headers in order with the nil value kept nil,
// before the stamped ones.
func recordMatches(t *testing.T, r *kgo.Record, key []byte, python bool) bool {
	t.Helper()
	if (r.Key == nil) != (key == nil) || !bytes.Equal(r.Key, key) {
		t.Errorf("record %s: key %q (nil %v), written %q (nil %v)", header(r, outbox.DefaultMessageIDHeader), r.Key, r.Key == nil, key, key == nil)
		return false
	}
	if !python {
		return true
	}
	if len(r.Headers) < 2 || r.Headers[0].Key != "source" || string(r.Headers[0].Value) != "py" ||
		r.Headers[1].Key != "nil-value" || r.Headers[1].Value != nil {
		t.Errorf("record %s: headers %v, written [source=py nil-value=<nil>] first", header(r, outbox.DefaultMessageIDHeader), r.Headers)
		return false
	}
	return true
}
