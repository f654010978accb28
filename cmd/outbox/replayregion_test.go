package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

// In region mode outbox replay reserves the new number in the bucket's
// counter, which only the bucket's region writes: without OUTBOX_REGION,
// with a region other than its client's (--region), or for a dead letter
// of another region's slice replicated into this region's tables, it is
// refused with exit 3 and no counter moves; in the bucket's region, with
// its client, it replays.
func TestReplayInRegionMode(t *testing.T) {
	c1, d, tables := outboxEnv(t)
	r1, r2 := d.OtherRegion()
	// r2's replica: DynamoDB Local keeps each region's tables apart.
	c2 := newCLI(t)
	c2.conn = append([]string{}, c1.conn...)
	c2.conn[slices.Index(c2.conn, "--region")+1] = r2
	client2 := d.InRegion(r2)
	regions := r1 + "," + r2 // r1: buckets 0..1, r2: 2..3
	c1.step(exitOK, "init", "--buckets", "4", "--regions", regions)
	c2.step(exitOK, "init", "--buckets", "4", "--regions", regions)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// park writes a message with region's writer and parks it with outbox
	// park, as that region's operator would.
	park := func(c *cli, client *dynamodb.Client, region string) (string, string) {
		t.Helper()
		w, err := dynamo.NewWriter(ctx, client, tables, dynamo.Region(region))
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte(region), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		b, s := strconv.Itoa(res.Messages[0].Bucket), strconv.FormatInt(res.Messages[0].Sequence, 10)
		c.env["OUTBOX_REGION"] = region
		c.step(exitOK, "park", "--bucket", b, "--head")
		return b, s
	}
	b1, s1 := park(c1, d.Client, r1)
	b2, s2 := park(c2, client2, r2)
	// Replication brings r2's dead letter into r1's tables.
	testenv.Replicate(ctx, t, client2, d.Client, tables.Control, "parked#"+b2)

	counters := func() string {
		t.Helper()
		var s []string
		for b := range 4 {
			n, err := sequence.Last(ctx, d.Client, tables.Control, b)
			if err != nil {
				t.Fatal(err)
			}
			s = append(s, strconv.FormatInt(n, 10))
		}
		return strings.Join(s, ",")
	}
	before := counters()
	for _, tc := range []struct {
		name, region, bucket, seq, says string
	}{
		{"no OUTBOX_REGION", "", b1, s1, "OUTBOX_REGION=" + r1},
		{"OUTBOX_REGION another than the client's", r2, b2, s2, "its DynamoDB client is for " + r1},
		{"a replicated dead letter of another region's slice", r1, b2, s2, "OUTBOX_REGION=" + r2},
	} {
		c1.env["OUTBOX_REGION"] = tc.region
		code, stdout, stderr := c1.run("replay", "--bucket", tc.bucket, "--seq", tc.seq)
		if code != exitMisconfigured || !strings.Contains(stderr, tc.says) {
			t.Errorf("replay, %s: exit %d, want %d naming %q\nstdout: %s\nstderr: %s", tc.name, code, exitMisconfigured, tc.says, stdout, stderr)
		}
		t.Logf("replay, %s: exit %d: %s", tc.name, code, strings.TrimSpace(stderr))
		if after := counters(); after != before {
			t.Errorf("replay, %s: %s's counters went from %s to %s", tc.name, r1, before, after)
		}
	}
	c1.env["OUTBOX_REGION"] = r1
	c1.step(exitOK, "replay", "--bucket", b1, "--seq", s1)
	c2.env["OUTBOX_REGION"] = r2
	c2.step(exitOK, "replay", "--bucket", b2, "--seq", s2)
}
