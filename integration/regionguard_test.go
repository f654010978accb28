package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

// regionReplicas creates an outbox in region mode over two regions, with
// bucketCount buckets: r1 is the region of d's client, r2 another, and c2
// a client for r2 on the same endpoint. DynamoDB Local (and LocalStack)
// keep each region's tables apart, so the outbox is created in both, as a
// global table's two replicas; nothing replicates between them (a test
// copies what it needs copied). r1 writes buckets 0..bucketCount/2-1.
func regionReplicas(ctx context.Context, t *testing.T, d *testenv.Dynamo, tables dynamo.Tables, bucketCount int) (r1, r2 string, c2 *dynamodb.Client) {
	t.Helper()
	r1, r2 = d.OtherRegion()
	c2 = d.InRegion(r2)
	for _, c := range []*dynamodb.Client{d.Client, c2} {
		if err := dynamo.CreateTables(ctx, c, tables, dynamo.BucketCount(bucketCount), dynamo.Regions(r1, r2)); err != nil {
			t.Fatalf("CreateTables in %s: %v", c.Options().Region, err)
		}
	}
	return r1, r2, c2
}

// parkOnly is the publisher of a relay that only parks.
type parkOnly struct{}

func (parkOnly) Publish(context.Context, []outbox.Message) (int, error) {
	return 0, errors.New("this relay only parks")
}

// parkOne writes one message in region's replica (client's) with region's
// writer, parks it there as outbox park does, and returns its bucket and
// sequence.
func parkOne(ctx context.Context, t *testing.T, client *dynamodb.Client, tables dynamo.Tables, region string) (int, int64) {
	t.Helper()
	w, err := dynamo.NewWriter(ctx, client, tables, dynamo.Region(region))
	if err != nil {
		t.Fatalf("NewWriter in %s: %v", region, err)
	}
	res, err := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte(region + "-parked"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Messages[0]
	st, err := dynamo.NewStore(ctx, client, tables)
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(ctx, st, parkOnly{}, relay.Region(region), relay.RelayID("parker"), relay.HolderWait(0), relay.ResumeReleased(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Park(ctx, m.Bucket, m.Sequence, "region-guard test"); err != nil {
		t.Fatalf("park bucket %d sequence %d in %s: %v", m.Bucket, m.Sequence, region, err)
	}
	return m.Bucket, m.Sequence
}

// TestRegionGuard: in region mode no sequence number is reserved outside
// the process's region (docs/design.md §14.1, R1). Against region r1's
// replica, none of these writes a counter of r2's slice (nor r1's): a
// replay without a region, a replay there of a dead letter of r2's slice
// replicated from r2, a Go writer told r2 but given r1's client, and the
// Python writer likewise. Each is refused with a typed error before
// anything is reserved; the same calls with the right region and client
// work.
func TestRegionGuard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := testenv.DynamoDB(t)
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	r1, r2, c2 := regionReplicas(ctx, t, d, tables, 4) // r1: buckets 0..1, r2: 2..3
	// counters are r1's replica's counters, in bucket order.
	counters := func() []int64 {
		t.Helper()
		var out []int64
		for b := range 4 {
			n, err := sequence.Last(ctx, d.Client, tables.Control, b)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	unchanged := func(what string, before []int64) bool {
		t.Helper()
		if after := counters(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("%s: %s's counters went from %v to %v", what, r1, before, after)
			return false
		}
		return true
	}

	// 1. Replay. A dead letter of each region's slice in r1's replica: r1's
	// own, and r2's, replicated from r2.
	b2, s2 := parkOne(ctx, t, c2, tables, r2)
	testenv.Replicate(ctx, t, c2, d.Client, tables.Control, "parked#"+strconv.Itoa(b2))
	b1, s1 := parkOne(ctx, t, d.Client, tables, r1)
	before := counters()
	noRegion, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	_, errNoRegion := noRegion.ReplayParked(ctx, b1, s1, nil)
	inR1, err := dynamo.NewStore(ctx, d.Client, tables, dynamo.Region(r1))
	if err != nil {
		t.Fatal(err)
	}
	_, errOther := inR1.ReplayParked(ctx, b2, s2, nil)
	var (
		me *outbox.MisconfigurationError
		re *sequence.RegionError
	)
	replayRefused := 0
	switch {
	case !errors.As(errNoRegion, &me) || me.Setting != "Region":
		t.Errorf("replay of bucket %d without a region: %v, want a *MisconfigurationError for Region", b1, errNoRegion)
	case !errors.As(errOther, &re) || re.Owner != r2 || re.Region != r1 || !strings.Contains(errOther.Error(), "OUTBOX_REGION="+r2):
		t.Errorf("replay in %s of bucket %d, %s's: %v, want a *sequence.RegionError naming %s", r1, b2, r2, errOther, r2)
	case unchanged("the refused replays", before):
		replayRefused = 1
	}
	if m, err := inR1.ReplayParked(ctx, b1, s1, nil); err != nil || m.Bucket != b1 {
		t.Errorf("replay in %s of its own bucket %d: %+v, %v", r1, b1, m, err)
	}

	// 2. A Go writer told r2, given r1's client.
	before = counters()
	wrongClientRefused := 0
	w, err := dynamo.NewWriter(ctx, d.Client, tables, dynamo.Region(r2))
	if w != nil {
		res, werr := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte("k"), Value: []byte("v")})
		t.Errorf("NewWriter(Region(%s)) with a client for %s was accepted; its write: %+v, %v", r2, r1, res.Messages, werr)
	}
	switch {
	case !errors.As(err, &re) || re.Region != r2 || re.ClientRegion != r1 || !errors.As(err, &me) || me.Setting != "Region":
		t.Errorf("NewWriter(Region(%s)) with a client for %s: %v, want a *sequence.RegionError", r2, r1, err)
	case unchanged("the refused writer", before):
		wrongClientRefused = 1
	}
	if w, err := dynamo.NewWriter(ctx, c2, tables, dynamo.Region(r2)); err != nil {
		t.Errorf("NewWriter(Region(%s)) with its own client: %v", r2, err)
	} else if res, err := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte("k"), Value: []byte("v")}); err != nil || res.Messages[0].Bucket < 2 {
		t.Errorf("the writer of %s wrote %+v, %v; want its slice 2..3", r2, res.Messages, err)
	}

	// 3. The Python writer told r2 (--region-id), given r1's client
	// (--region, d's).
	before = counters()
	pyRefused := 0
	results, code := testenv.RunPythonWriter(ctx, t, d, tables.Messages, tables.Control,
		[]testenv.PythonTx{{Messages: []any{map[string]any{"topic": "orders", "key": "k", "value": "v"}}}}, "--region-id", r2)
	switch {
	case code != 3 || len(results) != 1 || results[0].Error != "Outbox.Config" ||
		!strings.Contains(results[0].Message, fmt.Sprintf("its DynamoDB client is for '%s'", r1)):
		t.Errorf("the Python writer told %s with a client for %s: exit %d, %+v; want exit 3 and Outbox.Config naming the client's region", r2, r1, code, results)
	case unchanged("the refused Python writer", before):
		pyRefused = 1
	}
	if results, code := testenv.RunPythonWriter(ctx, t, d, tables.Messages, tables.Control,
		[]testenv.PythonTx{{Messages: []any{map[string]any{"topic": "orders", "key": "k", "value": "v"}}}}, "--region-id", r2, "--region", r2); code != 0 || len(results) != 1 || !results[0].OK || results[0].Messages[0].Bucket < 2 {
		t.Errorf("the Python writer of %s with its own client: exit %d, %+v", r2, code, results)
	}

	fmt.Printf("region-guard: replay_refused=%d wrong_client_refused=%d python_wrong_client_refused=%d\n", replayRefused, wrongClientRefused, pyRefused)
}
