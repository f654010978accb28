package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

// TestRebucketCLI is `outbox buckets set` a person can trust (issue 29,
// item 7), on DynamoDB Local:
//
//   - interrupt: the built CLI, sent SIGINT while its change waits for a
//     bucket that cannot drain (no relay) and a Go writer waits for the
//     change, aborts the change before it exits 4: the count stays, every
//     counter is thawed, and the writer resumes long before the change's
//     deadline;
//   - relay, sweeper, python: a change abandoned past its deadline (its
//     tool died after freezing every counter) is met first by the relay
//     function behind the stream, then by the sweeper function, then by the
//     Python writer, each alone, and each ends (aborts) it, as it reports
//     (Relay.ChangesAborted, the sweeper's BucketCountChangesAborted EMF
//     value, the Python writer's aborted_changes).
//
// The summary line lists who was seen to end each change.
func TestRebucketCLI(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	interrupted := 0
	var by []string
	t.Run("interrupt", func(t *testing.T) {
		if interruptAborts(t, bin) {
			interrupted++
		}
	})
	for _, party := range []string{"relay", "sweeper", "python"} {
		t.Run(party, func(t *testing.T) {
			if expiredEndedBy(t, party) {
				by = append(by, party)
			}
		})
	}
	got := strings.Join(by, ",")
	fmt.Printf("rebucket-cli: interrupted_aborted=%d expired_aborted_by=%s\n", interrupted, got)
	if interrupted != 1 || got != "relay,sweeper,python" {
		t.Fatalf("interrupted_aborted=%d expired_aborted_by=%s, want 1 and relay,sweeper,python", interrupted, got)
	}
}

// buildCLI builds cmd/outbox into the test's temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "outbox")
	build := exec.Command("go", "build", "-o", out, "./outbox")
	build.Dir = filepath.Join(testenv.RepoRoot(), "cmd") // the CLI's module
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build cmd/outbox: %v\n%s", err, b)
	}
	return out
}

// counterEpochs reads the ce attribute of buckets 0..n-1's counters.
func counterEpochs(ctx context.Context, t *testing.T, e *env, n int) []string {
	t.Helper()
	ces := make([]string, n)
	for b := range n {
		out, err := e.dynamo.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.tables.Control), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: sequence.PartitionKey(b)}, "sk": &types.AttributeValueMemberS{Value: sequence.SortKey}}})
		if err != nil {
			t.Fatal(err)
		}
		if ce, ok := out.Item["ce"].(*types.AttributeValueMemberN); ok {
			ces[b] = ce.Value
		}
	}
	return ces
}

// checkAborted checks that the change from 8 at epoch 0 ended aborted: 8
// at epoch 1, no change in progress, every counter of 0..15 serving epoch
// 1 (thawed).
func checkAborted(ctx context.Context, t *testing.T, e *env) bool {
	t.Helper()
	c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	ok := true
	if c.BucketCount != 8 || c.BucketEpoch != 1 || c.Changing() {
		t.Errorf("config after the change %+v, want BucketCount 8 at epoch 1 and no change in progress (aborted)", c)
		ok = false
	}
	for b, ce := range counterEpochs(ctx, t, e, 16) {
		if ce != "1" {
			t.Errorf("bucket %d's counter serves epoch %q, want 1 (thawed)", b, ce)
			ok = false
		}
	}
	return ok
}

func interruptAborts(t *testing.T, bin string) bool {
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A message no relay publishes: the change cannot drain.
	if _, err := e.writer.Write(ctx, nil, outbox.Message{Topic: e.topic, Key: []byte("k"), Value: []byte("pending")}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "buckets", "set", "16", "--change-timeout", "4m", "--timeout", "5m",
		"--messages", e.tables.Messages, "--control", e.tables.Control, "--endpoint", e.dynamo.Endpoint, "--region", e.dynamo.Config.Region)
	cmd.Env = testenv.PythonEnv(ctx, t, e.dynamo) // the DynamoDB Local credentials and region
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFrozen(ctx, t, e, 16)
	c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	// A writer that meets the frozen counters waits for the change.
	wrote := make(chan error, 1)
	var res dynamo.Result
	go func() {
		var err error
		res, err = e.writer.Write(ctx, nil, outbox.Message{Topic: e.topic, Key: []byte("k"), Value: []byte("during")})
		wrote <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("a write during the change returned before the change ended: %v", err)
	case <-time.After(200 * time.Millisecond): // not a timing assertion: a write that returns early fails above
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	ok := true
	if code != 4 || !strings.Contains(stderr.String(), "aborted because it was interrupted") {
		t.Errorf("outbox buckets set after SIGINT: exit %d, stderr %q; want exit 4 and the change aborted because it was interrupted", code, stderr.String())
		ok = false
	}
	if !checkAborted(ctx, t, e) {
		ok = false
	}
	select {
	case err := <-wrote:
		if err != nil {
			t.Errorf("the paused write after the abort: %v", err)
			ok = false
		} else if m := res.Messages[0]; m.Bucket != outbox.BucketForKey([]byte("k"), 8) {
			t.Errorf("the paused write went to bucket %d, want the old count's %d", m.Bucket, outbox.BucketForKey([]byte("k"), 8))
			ok = false
		}
	case <-time.After(time.Until(c.ChangeDeadline)):
		t.Errorf("the paused write did not resume before the change's deadline %v", c.ChangeDeadline)
		ok = false
	}
	return ok
}

// abandonChange leaves the config item and the counters as a `buckets set
// 16` killed after its freeze leaves them, with a deadline already past.
func abandonChange(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	dl := time.Now().Add(-time.Second).UnixMilli()
	_, err := e.dynamo.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.tables.Control), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "config"}, "sk": &types.AttributeValueMemberS{Value: "config"}},
		UpdateExpression:          aws.String("SET #v = :v, #be = :be, #nb = :nb, #cd = :cd"),
		ConditionExpression:       aws.String("attribute_not_exists(#nb) AND #bc = :bc"),
		ExpressionAttributeNames:  map[string]string{"#v": "v", "#be": "be", "#nb": "nb", "#cd": "cd", "#bc": "bc"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": num(3), ":be": num(0), ":nb": num(16), ":cd": num(dl), ":bc": num(8)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for b := range 16 {
		if _, err := sequence.Freeze(ctx, e.dynamo.Client, e.tables.Control, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables); err != nil || !c.Changing() || c.NextBucketCount != 16 {
		t.Fatalf("abandoned change: config %+v, %v", c, err)
	}
}

// waitAborted waits until aborted says a change was aborted (the backstop
// fails the test: nobody did).
func waitAborted(ctx context.Context, t *testing.T, e *env, aborted func() bool) {
	t.Helper()
	for !aborted() {
		select {
		case <-ctx.Done():
			c, err := dynamo.ReadConfig(context.Background(), e.dynamo.Client, e.tables)
			t.Fatalf("nobody reports aborting the change past its deadline; config %+v, %v", c, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// expiredEndedBy abandons a change past its deadline and lets party alone
// meet it; it reports whether party ended it, as party says and the
// tables show.
func expiredEndedBy(t *testing.T, party string) bool {
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Messages written before the change: the relay's stream backlog.
	for i := range 4 {
		if _, err := e.writer.Write(ctx, nil, outbox.Message{Topic: e.topic, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("before")}); err != nil {
			t.Fatal(err)
		}
	}
	abandonChange(ctx, t, e)
	ended := false
	switch party {
	case "relay":
		// The relay function behind the stream: its first invocation reads
		// the config item (at most every RegionRefreshInterval).
		relay, err := outbox.NewRelay(ctx, e.store, e.pub, outbox.DeadlineMargin(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		fn := handler.NewRelay(relay, 8, quiet)
		e.mapping(ctx, t, esm.InProcess(fn.Handle, esm.Timeout(time.Minute)))
		waitAborted(ctx, t, e, func() bool { return fn.Counters().ChangesAborted.Load() > 0 })
		if n := relay.ChangesAborted(); n != 1 {
			t.Errorf("the relay reports %d changes aborted, want 1", n)
		}
		ended = relay.ChangesAborted() == 1
	case "sweeper":
		relay, err := outbox.NewRelay(ctx, e.store, e.pub)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		em, err := handler.NewEmitter(&buf, e.tables.Messages)
		if err != nil {
			t.Fatal(err)
		}
		sw, err := handler.NewSweeper(relay, quiet, handler.SweeperEMF(em))
		if err != nil {
			t.Fatal(err)
		}
		sum, err := sw.Handle(ctx, events.CloudWatchEvent{Time: time.Now()})
		if err != nil {
			t.Fatalf("sweeper: %v", err)
		}
		var line map[string]any
		if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil {
			t.Fatalf("sweeper EMF line %q: %v", buf.String(), err)
		}
		if !sum.ChangeAborted || line["BucketCountChangesAborted"] != 1.0 || line["BucketCountChangeOverdue"] != 0.0 {
			t.Errorf("sweeper summary %+v, EMF line %v: want the change aborted (BucketCountChangesAborted 1, BucketCountChangeOverdue 0)", sum, line)
		}
		ended = sum.ChangeAborted && line["BucketCountChangesAborted"] == 1.0
	case "python":
		py := startPyLines(ctx, t, e.dynamo, e.tables)
		py.send(testenv.PythonTx{Messages: []any{map[string]any{"topic": e.topic, "key": "py", "value": "after"}}})
		var r struct {
			pyLine
			AbortedChanges int `json:"aborted_changes"`
		}
		if !py.out.Scan() || json.Unmarshal(py.out.Bytes(), &r) != nil {
			t.Fatalf("python -m outbox_writer printed %q (%v)", py.out.Text(), py.out.Err())
		}
		if !r.OK || r.AbortedChanges != 1 || r.BucketCount != 8 || r.Epoch != 1 {
			t.Errorf("the Python write: %+v, want it committed under BucketCount 8 at epoch 1 after aborting the change (aborted_changes 1)", r)
		}
		ended = r.OK && r.AbortedChanges == 1
	}
	return checkAborted(ctx, t, e) && ended
}
