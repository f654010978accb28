package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// TestRebucketCLI is `outbox buckets set` a person can trust (issue 29,
// item 7; issue 28, item 5: the cut-over), on DynamoDB Local:
//
//   - before: the built CLI, sent SIGINT while it waits for the previous
//     change's old epoch (a bucket that cannot drain: no relay), exits 4
//     and writes nothing;
//   - after: sent SIGINT after its flip, while it watches the old epoch
//     drain, it exits 0 saying the change stands and which old bucket
//     still drains; a Go writer that wrote meanwhile did not wait for it
//     (it returned before the signal, with no relay running);
//   - sweeper, relay, cli: an old epoch left draining (its tool gone) is
//     found drained and ended by the sweeper function, by a relay's full
//     sweep (Relay.Sweep, what Relay.Run runs), or by buckets set run
//     again, each alone, as each reports (the sweeper's
//     BucketCountChangesCompleted EMF value, Relay.ChangesCompleted, the
//     CLI's output).
//
// The summary line says what each interrupt left and who ended the old
// epoch.
func TestRebucketCLI(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	before, after := "?", "?"
	var by []string
	t.Run("before", func(t *testing.T) { before = interruptBeforeFlip(t, bin) })
	t.Run("after", func(t *testing.T) { after = interruptAfterFlip(t, bin) })
	for _, party := range []string{"sweeper", "relay", "cli"} {
		t.Run(party, func(t *testing.T) {
			if oldEpochEndedBy(t, bin, party) {
				by = append(by, party)
			}
		})
	}
	got := strings.Join(by, ",")
	fmt.Printf("rebucket-cli: interrupted_before_flip=%s interrupted_after_flip=%s old_epoch_ended_by=%s\n", before, after, got)
	if before != "aborted" || after != "stands" || got != "sweeper,relay,cli" {
		t.Fatalf("interrupted_before_flip=%s interrupted_after_flip=%s old_epoch_ended_by=%s, want aborted, stands and sweeper,relay,cli", before, after, got)
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

// runCLI starts the built CLI on e's tables with args; its stderr is
// read line by line into lines.
func runCLI(ctx context.Context, t *testing.T, e *env, bin string, args ...string) (*exec.Cmd, *bytes.Buffer, chan string) {
	t.Helper()
	args = append(args, "--messages", e.tables.Messages, "--control", e.tables.Control, "--endpoint", e.dynamo.Endpoint, "--region", e.dynamo.Config.Region)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = testenv.PythonEnv(ctx, t, e.dynamo) // the DynamoDB Local credentials and region
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, &stdout, lines
}

// exitOf waits for cmd and returns its exit code and what it printed on
// stderr.
func exitOf(t *testing.T, cmd *exec.Cmd, lines chan string) (int, string) {
	t.Helper()
	var stderr strings.Builder
	for l := range lines {
		stderr.WriteString(l + "\n")
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stderr.String()
}

// drainingChange writes a message no relay publishes and changes 8 → 16
// with a short timeout: the change stands, its old epoch draining. It
// returns the old bucket.
func drainingChange(ctx context.Context, t *testing.T, e *env) int {
	t.Helper()
	res, err := e.writer.Write(ctx, nil, outbox.Message{Topic: e.topic, Key: []byte("k"), Value: []byte("pending")})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := dynamo.ChangeBucketCount(ctx, e.dynamo.Client, e.tables, 16, dynamo.ChangeTimeout(100*time.Millisecond))
	if b := res.Messages[0].Bucket; err != nil || ch.Ended || !slices.Equal(ch.Draining, []int{b}) {
		t.Fatalf("change 8 → 16 with bucket %d pending: %+v, %v; want it made, bucket %d draining", b, ch, err, b)
	}
	return res.Messages[0].Bucket
}

func interruptBeforeFlip(t *testing.T, bin string) string {
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b := drainingChange(ctx, t, e)
	cmd, _, lines := runCLI(ctx, t, e, bin, "buckets", "set", "12", "--change-timeout", "4m", "--timeout", "5m")
	// It says it waits before it does: the signal then finds it waiting
	// or about to (the result is the same: nothing written, exit 4).
	if l := <-lines; !strings.Contains(l, "waiting (at most 4m0s) for the old epoch of the previous BucketCount change 8 → 16") {
		t.Fatalf("buckets set 12 first said %q", l)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code, stderr := exitOf(t, cmd, lines)
	c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	if code != 4 || !strings.Contains(stderr, "aborted before the flip because it was interrupted") || c.BucketCount != 16 || c.BucketEpoch != 1 || c.OldBucketCount != 8 {
		t.Errorf("buckets set 12 interrupted while bucket %d drains: exit %d, stderr %q, config %+v; want exit 4, aborted, nothing written", b, code, stderr, c)
		return "wrote"
	}
	return "aborted"
}

func interruptAfterFlip(t *testing.T, bin string) string {
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := e.writer.Write(ctx, nil, outbox.Message{Topic: e.topic, Key: []byte("k"), Value: []byte("pending")})
	if err != nil {
		t.Fatal(err)
	}
	old := res.Messages[0].Bucket
	cmd, stdout, lines := runCLI(ctx, t, e, bin, "buckets", "set", "16", "--change-timeout", "4m", "--timeout", "5m")
	for {
		c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables)
		if err != nil {
			t.Fatal(err)
		}
		if c.Draining() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A write now: no relay runs, the old epoch cannot drain, and the
	// write returns all the same, under the new count.
	during, err := e.writer.Write(ctx, nil, outbox.Message{Topic: e.topic, Key: []byte("k"), Value: []byte("during")})
	if err != nil {
		t.Fatalf("a write during the change: %v", err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code, stderr := exitOf(t, cmd, lines)
	c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	ok := true
	if code != 0 || !strings.Contains(stdout.String(), "BucketCount changed from 8 to 16 (epoch 1)") ||
		!strings.Contains(stdout.String(), fmt.Sprintf("the change stands; old buckets [%d] still drain", old)) {
		t.Errorf("buckets set 16 interrupted after its flip: exit %d, stdout %q, stderr %q; want exit 0, the change standing, bucket %d draining", code, stdout, stderr, old)
		ok = false
	}
	if c.BucketCount != 16 || c.BucketEpoch != 1 || c.OldBucketCount != 8 {
		t.Errorf("config %+v, want 16 at epoch 1, the old epoch of 8 draining", c)
		ok = false
	}
	if m := during.Messages[0]; m.Bucket != outbox.BucketForKey([]byte("k"), 16) {
		t.Errorf("the write during the change went to bucket %d, want the new count's %d", m.Bucket, outbox.BucketForKey([]byte("k"), 16))
		ok = false
	}
	if !ok {
		return "?"
	}
	return "stands"
}

// oldEpochEndedBy leaves an old epoch draining (its tool gone), drains it
// with a relay that does not end it, and lets party alone find it
// drained; it reports whether party ended it, as party says and the
// config item shows.
func oldEpochEndedBy(t *testing.T, bin, party string) bool {
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	drainingChange(ctx, t, e)
	rl, err := relay.New(ctx, e.store, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 16 {
		if _, err := rl.DrainBucket(ctx, b); err != nil {
			t.Fatalf("drain bucket %d: %v", b, err)
		}
	}
	if c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables); err != nil || !c.Draining() {
		t.Fatalf("config after the drain %+v, %v: want the old epoch still draining (nobody ended it yet)", c, err)
	}
	said := false
	switch party {
	case "sweeper":
		var buf bytes.Buffer
		em, err := handler.NewEmitter(&buf, e.tables.Messages)
		if err != nil {
			t.Fatal(err)
		}
		sw, err := handler.NewSweeper(rl, quiet, handler.SweeperEMF(em))
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
		said = sum.ChangeCompleted && line["BucketCountChangesCompleted"] == 1.0 && line["BucketCountChangeOverdue"] == 0.0
		if !said {
			t.Errorf("sweeper summary %+v, EMF line %v: want the old epoch ended (BucketCountChangesCompleted 1, BucketCountChangeOverdue 0)", sum, line)
		}
	case "relay":
		rep, err := rl.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		said = rep.Change != nil && rep.Change.Completed && rl.ChangesCompleted() == 1
		if !said {
			t.Errorf("the relay's sweep saw %+v and reports %d changes completed, want it to end the old epoch", rep.Change, rl.ChangesCompleted())
		}
	case "cli":
		cmd, stdout, lines := runCLI(ctx, t, e, bin, "buckets", "set", "16")
		code, stderr := exitOf(t, cmd, lines)
		said = code == 0 && strings.Contains(stdout.String(), "the old epoch of its change drained and ended")
		if !said {
			t.Errorf("buckets set 16 again: exit %d, stdout %q, stderr %q; want the old epoch ended", code, stdout, stderr)
		}
	}
	c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	if c.BucketCount != 16 || c.BucketEpoch != 1 || c.Draining() {
		t.Errorf("config after %s: %+v, want 16 at epoch 1, no old epoch", party, c)
		return false
	}
	return said
}
