package integration_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/attrib"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

// relayBehindMapping runs a relay as deployed (stream → local event-source
// mapping → relay handler) until the test ends. No fault is injected, but
// on a busy machine a resumed drain can outlast its window before its
// tombstones land (they are then published again): its store and
// publisher are attributed into chk, which tells those from a decided
// message published again.
func (e *env) relayBehindMapping(ctx context.Context, t *testing.T, chk *checker.Checker) *relay.Relay {
	t.Helper()
	at := attrib.New(e.store, e.pub, chk)
	rl, err := relay.New(ctx, at, at.ViaAs("relay", e.pub), relay.DeadlineMargin(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fn := handler.NewRelay(rl, 8, quiet)
	e.mapping(ctx, t, esm.InProcess(fn.Handle, esm.Timeout(time.Minute)))
	return rl
}

// pyLines is the Python writer's CLI in --json-lines mode: one Writer for
// the whole process, one transaction per line written, its result read
// before the next is sent, so the test decides what happens between two
// transactions (a BucketCount change) while the writer keeps its state.
type pyLines struct {
	t   *testing.T
	in  *json.Encoder
	out *bufio.Scanner
	// events are the writer's stderr lines that are JSON events
	// (--report-change-waits); the other lines are kept for the log.
	events chan string
	mu     sync.Mutex
	stderr strings.Builder
}

func startPyLines(ctx context.Context, t *testing.T, d *testenv.Dynamo, tables dynamo.Tables, args ...string) *pyLines {
	t.Helper()
	cmd := exec.CommandContext(ctx, testenv.Python(t), append([]string{"-m", "outbox_writer", "--endpoint", d.Endpoint, "--region", d.Config.Region,
		"--messages-table", tables.Messages, "--control-table", tables.Control, "--json-lines", "-"}, args...)...)
	cmd.Env = testenv.PythonEnv(ctx, t, d)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyLines{t: t, in: json.NewEncoder(stdin), out: bufio.NewScanner(stdout), events: make(chan string, 16)}
	p.out.Buffer(make([]byte, 1<<20), 1<<24)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, `{"event"`) {
				p.events <- line
			} else {
				p.mu.Lock()
				p.stderr.WriteString(line + "\n")
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		<-read
		_ = cmd.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		if t.Failed() && p.stderr.Len() > 0 {
			t.Logf("python -m outbox_writer stderr: %s", p.stderr.String())
		}
	})
	return p
}

// pyLine is one result line, with what the writer reports of BucketCount
// changes.
type pyLine struct {
	testenv.PythonResult
	Rebuckets   int   `json:"rebuckets"`
	PausedMs    int64 `json:"paused_ms"`
	BucketCount int   `json:"bucket_count"`
	Epoch       int64 `json:"epoch"`
}

// next reads one line: the result of the last transaction sent, or the
// writer's refusal at start.
func (p *pyLines) next() pyLine {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("python -m outbox_writer ended without a result: %v", p.out.Err())
	}
	var r pyLine
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		p.t.Fatalf("python -m outbox_writer printed %q: %v", p.out.Text(), err)
	}
	return r
}

func (p *pyLines) write(tx testenv.PythonTx) pyLine {
	p.t.Helper()
	p.send(tx)
	return p.next()
}

// send sends a transaction without waiting for its result (next).
func (p *pyLines) send(tx testenv.PythonTx) {
	p.t.Helper()
	if err := p.in.Encode(tx); err != nil {
		p.t.Fatalf("send a transaction to python -m outbox_writer: %v", err)
	}
}

// event waits for the writer's next event line.
func (p *pyLines) event(ctx context.Context) string {
	p.t.Helper()
	select {
	case e := <-p.events:
		return e
	case <-ctx.Done():
		p.t.Fatalf("python -m outbox_writer reported no event: %v", ctx.Err())
		return ""
	}
}

// waitCut waits until the config item says a BucketCount change flipped
// to epoch (its old epoch draining) and every counter below buckets is cut
// into it, so that the next reservation of a writer at an older epoch is
// refused and moves to the new count.
func waitCut(ctx context.Context, t *testing.T, e *env, buckets int, epoch int64) {
	t.Helper()
	for {
		cut := 0
		c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables)
		if err != nil {
			t.Fatal(err)
		}
		for b := range buckets {
			out, err := e.dynamo.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.tables.Control), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: sequence.PartitionKey(b)}, "sk": &types.AttributeValueMemberS{Value: sequence.SortKey}}})
			if err != nil {
				t.Fatal(err)
			}
			if ce, ok := out.Item["ce"].(*types.AttributeValueMemberN); ok && ce.Value == fmt.Sprint(epoch) {
				cut++
			}
		}
		if c.Draining() && c.BucketEpoch == epoch && cut == buckets {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no BucketCount change flipped to epoch %d with its %d counters cut (config %+v, %d cut)", epoch, buckets, c, cut)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestPythonWriterRebucket runs one Python writer process (clients/python)
// through two online BucketCount changes made by the Go side
// (dynamo.ChangeBucketCount, what outbox buckets set runs), 8 → 16 → 12,
// while the Go relay drains through the local stream mapping. Each
// change's old epoch is held draining by a reservation the writer
// abandoned (a crashed writer's gap: the old bucket is not decided up to
// its cut point before the number is), and the writer is sent a
// transaction once the change flipped and cut every counter. That write
// must not wait: it learns the new count from its refused reservation,
// moves its messages to the new count's buckets (the ones Go's
// outbox.BucketFor gives), stamps them and commits while the old epoch
// still drains (paused_ms 0). The test then fences the abandoned number,
// as a relay or the change would after their gap timeouts, and the old
// epoch ends. Every message is consumed, each key's in commit order across
// both changes (the relays' gate holds the new messages of the abandoned
// bucket's keys until then). Nothing here depends on timing: each step
// waits for the condition the next one needs.
func TestPythonWriterRebucket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	chk := checker.New()
	e.relayBehindMapping(ctx, t, chk)
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := e.checkDelivery(cctx, t, chk)

	py := startPyLines(ctx, t, e.dynamo, e.tables)
	order := map[string]int64{}
	var (
		committed, moved, placement, txs int
		maxPause                         int64
	)
	// send commits n transactions of two messages of one key each and
	// checks they went under count buckets; before reading the first
	// result it runs during (nil: nothing), and wantMove says that write
	// must have moved its messages to a new count, without pausing.
	send := func(n, count int, wantMove bool, during func()) {
		t.Helper()
		for i := range n {
			txs++
			key := fmt.Sprintf("py-k%d", txs%6)
			var msgs []any
			var ids []string
			for range 2 {
				order[key]++
				id := outbox.NewID()
				ids = append(ids, id)
				msgs = append(msgs, map[string]any{"topic": e.topic, "id": id, "key_b64": base64.StdEncoding.EncodeToString([]byte(key)), "value": fmt.Sprint(order[key])})
			}
			sent := time.Now()
			py.send(testenv.PythonTx{Messages: msgs})
			if i == 0 && during != nil {
				during()
			}
			r := py.next()
			if !r.OK {
				t.Fatalf("Python write of %s: %s: %s", key, r.Error, r.Message)
			}
			for j, m := range r.Messages {
				chk.Committed(ids[j], key, order[key]-int64(len(ids)-1-j))
				want, _ := outbox.BucketFor(outbox.Message{ID: m.ID, Key: []byte(key)}, count)
				if r.BucketCount != count || m.Bucket != want {
					placement++
					t.Errorf("message %s of %s: bucket %d under BucketCount %d (epoch %d), want bucket %d under %d", m.ID, key, m.Bucket, r.BucketCount, r.Epoch, want, count)
				}
			}
			committed += len(r.Messages)
			if r.Rebuckets > 0 {
				moved++
			}
			if wantMove && i == 0 && (r.Rebuckets == 0 || r.PausedMs != 0) {
				t.Errorf("the first write after the change to %d did not move its messages without pausing (rebuckets=%d paused_ms=%d)", count, r.Rebuckets, r.PausedMs)
			}
			if wantMove {
				// The write's round trip through the process, measured
				// here: what a change adds shows against the others'.
				maxPause = max(maxPause, time.Since(sent).Milliseconds())
			}
		}
	}
	send(10, 8, false, nil)
	changes := 0
	for _, step := range []struct{ from, to int }{{8, 16}, {16, 12}} {
		// A reservation abandoned holds the change until its number is
		// decided; the gap timeouts are far beyond the test's, so only
		// the test's fence below decides it.
		r := py.write(testenv.PythonTx{Messages: []any{map[string]any{"topic": e.topic, "key": "py-k0", "value": "abandoned"}}, AbandonAfterReserve: true})
		if r.Error != "Abandoned" || len(r.Reserved) != 1 {
			t.Fatalf("abandon after reserve: %+v", r)
		}
		hole := r.Reserved[0]
		done := make(chan error, 1)
		go func() {
			_, err := dynamo.ChangeBucketCount(ctx, e.dynamo.Client, e.tables, step.to, dynamo.ChangeTimeout(5*time.Minute), dynamo.ChangeGapTimeout(5*time.Minute))
			done <- err
		}()
		waitCut(ctx, t, e, max(step.from, step.to), int64(changes+1))
		send(1, step.to, true, nil)
		if c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables); err != nil || !c.Draining() {
			t.Fatalf("config %+v (%v) after the write: the old epoch ended before its hole was decided, or the write waited for it", c, err)
		}
		if err := e.store.Fence(ctx, int(hole[0]), hole[1], time.Now()); err != nil {
			t.Fatalf("fence the abandoned number %v: %v", hole, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("change %d → %d: %v", step.from, step.to, err)
		}
		changes++
		send(5, step.to, false, nil)
	}
	r, c := e.settleRebucket(ctx, t, chk, stopConsumer, consumed)
	fmt.Printf("python-writer: rebucket changes=%d committed=%d lost=%d order_violations=%d placement_mismatches=%d moved_writes=%d moved_write_max_ms=%d (duplicates=%d bucket_count=%d epoch=%d)\n",
		changes, r.Committed, r.Lost, r.OrderViolations, placement, moved, maxPause, r.Duplicates, c.BucketCount, c.BucketEpoch)
	if !r.OK() || changes != 2 || c.BucketCount != 12 || c.BucketEpoch != 2 || r.Committed != committed || moved < 2 {
		t.Fatalf("result %+v, config %+v, moved writes %d", r, c, moved)
	}
}

// TestPythonWriterRegionMode: on an outbox in region mode the Python writer
// refuses to start without its region, and with it (and a client of its
// region: each region's replica) puts every message in its region's slice,
// in the bucket the Go writer of that region gives.
func TestPythonWriterRegionMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := testenv.DynamoDB(t)
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	r1, r2, c2 := regionReplicas(ctx, t, d, tables, 8)
	refused := startPyLines(ctx, t, d, tables).next()
	if refused.OK || refused.Error != "Outbox.Config" || !strings.Contains(refused.Message, "region mode") {
		t.Fatalf("the Python writer without a region on a region-mode outbox: %+v, want Outbox.Config naming region mode", refused)
	}
	mismatches, n := 0, 0
	for region, client := range map[string]*dynamodb.Client{r1: d.Client, r2: c2} {
		gw, err := dynamo.NewWriter(ctx, client, tables, dynamo.Region(region))
		if err != nil {
			t.Fatal(err)
		}
		py := startPyLines(ctx, t, d, tables, "--region-id", region, "--region", region)
		for i := range 12 {
			key := fmt.Sprintf("%s-key-%d", region, i)
			r := py.write(testenv.PythonTx{Messages: []any{map[string]any{"topic": "orders", "key": key, "value": "v"}}})
			if !r.OK {
				t.Fatalf("region %s: %s: %s", region, r.Error, r.Message)
			}
			m := r.Messages[0]
			want, err := gw.Bucket(outbox.Message{ID: m.ID, Key: []byte(key)})
			if err != nil {
				t.Fatal(err)
			}
			n++
			if m.Bucket != want {
				mismatches++
				t.Errorf("region %s, key %s: the Python writer chose bucket %d, the Go writer %d", region, key, m.Bucket, want)
			}
		}
	}
	fmt.Printf("python-writer: region-mode messages=%d placement_mismatches=%d refused_without_region=1\n", n, mismatches)
}
