package main

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/store/dynamo"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// responses is a stand-in for the pre-signed S3 URL CloudFormation waits on:
// it records every request it receives.
type responses struct {
	mu   sync.Mutex
	reqs []received
}

type received struct {
	method string
	body   cfn.Response
	raw    string
}

func newResponses(t *testing.T) (*responses, string) {
	r := &responses{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var resp cfn.Response
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Errorf("response body is not JSON: %v\n%s", err, b)
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, received{method: req.Method, body: resp, raw: string(b)})
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL + "/cloudformation-custom-resource-response?X-Amz-Signature=abc"
}

// event reads testdata/<name>.json with its {{placeholders}} filled in.
func event(t *testing.T, name string, vars map[string]string) cfn.Event {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{{"+k+"}}", v)
	}
	if i := strings.Index(s, "{{"); i >= 0 {
		t.Fatalf("testdata/%s.json: placeholder left at %q", name, s[i:min(len(s), i+30)])
	}
	var ev cfn.Event
	if err := json.Unmarshal([]byte(s), &ev); err != nil {
		t.Fatalf("testdata/%s.json: %v", name, err)
	}
	return ev
}

func readConfig(t *testing.T, client *dynamodb.Client, tables dynamo.Tables) outbox.Config {
	t.Helper()
	s, err := dynamo.NewStore(context.Background(), client, tables)
	if err != nil {
		t.Fatalf("open the outbox: %v", err)
	}
	c, err := s.Config(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCustomResource sends CloudFormation's requests, as the fixtures in
// testdata/ spell them, through cfn.LambdaWrap (what the function runs) to
// DynamoDB Local, and checks the answer the local HTTP server received and
// the config item left behind.
func TestCustomResource(t *testing.T) {
	d := testenv.DynamoDB(t)
	cases := []struct {
		name    string
		stored  int  // the config item's count before; 0: the stack's fresh tables, without one; -1: no tables
		storedW bool // the stored config item is in watermark mode (retention 24 h)
		pending bool // a message is waiting in the outbox
		// short: the invocation's deadline leaves an online BucketCount
		// change a 3-second watch or wait (no relay runs here).
		short bool
		// draining: a change to this count was made before (with the
		// pending message, no relay: its old epoch still drains).
		draining int
		fixture  string
		count    string // BucketCount in the request
		old      string // BucketCount in OldResourceProperties
		// Mode and RetentionHours in the request ("": delete and 24), and
		// the mode and retention stored after (checked when modeAfter is
		// set).
		mode, hours    string
		modeAfter      outbox.Mode
		retentionAfter time.Duration
		// What CloudFormation must receive, and the count stored after.
		status      cfn.StatusType
		reason      []string // substrings of Reason
		physicalID  string   // "" = outbox-config:<control table>; "request" = the RequestId
		storedAfter int
	}{
		{name: "create writes the config item", stored: 0, fixture: "create", count: "8", status: cfn.StatusSuccess, storedAfter: 8},
		{name: "create on an outbox that already says so", stored: 8, fixture: "create", count: "8", status: cfn.StatusSuccess, storedAfter: 8},
		// Online: the change stands although no relay drains the old
		// bucket (writers switched at once; the old epoch drains later).
		{name: "create on an outbox with another count and messages no relay drains", stored: 4, pending: true, short: true, fixture: "create", count: "8",
			status: cfn.StatusSuccess, storedAfter: 8},
		{name: "create without tables", stored: -1, fixture: "create", count: "8",
			status: cfn.StatusFailed, reason: []string{"ResourceNotFoundException"}, physicalID: "request"},
		{name: "update that keeps the count", stored: 8, pending: true, fixture: "update", count: "8", old: "8", status: cfn.StatusSuccess, storedAfter: 8},
		{name: "update grows an empty outbox", stored: 8, fixture: "update", count: "16", old: "8", status: cfn.StatusSuccess, storedAfter: 16},
		{name: "update while messages are pending and no relay drains them", stored: 8, pending: true, short: true, fixture: "update", count: "16", old: "8",
			status: cfn.StatusSuccess, storedAfter: 16},
		// A second change waits for the first's old epoch: aborted before
		// its flip, nothing written.
		{name: "update aborted while the previous change's old bucket does not drain", stored: 8, pending: true, draining: 16, short: true,
			fixture: "update", count: "12", old: "16",
			status: cfn.StatusFailed, reason: []string{"BucketCount stays 16", "asks for 12", "aborted before the flip"}, storedAfter: 16},
		{
			// After a refused update CloudFormation rolls back with the
			// old properties, which the stored item already has.
			name: "rollback of a refused update", stored: 8, pending: true, draining: 16, fixture: "update", count: "16", old: "12",
			status: cfn.StatusSuccess, storedAfter: 16,
		},
		{name: "update with a bad count", stored: 8, fixture: "update", count: "many", old: "8",
			status: cfn.StatusFailed, reason: []string{`BucketCount="many"`}, storedAfter: 8},
		{name: "update with a count out of range", stored: 8, fixture: "update", count: "5000", old: "8",
			status: cfn.StatusFailed, reason: []string{"BucketCount", "1..4096"}, storedAfter: 8},
		{name: "delete with messages pending", stored: 8, pending: true, fixture: "delete", count: "8", status: cfn.StatusSuccess, storedAfter: 8},
		{name: "delete without tables", stored: -1, fixture: "delete", count: "8", status: cfn.StatusSuccess},
		{name: "delete with a bad count", stored: 8, fixture: "delete", count: "", status: cfn.StatusSuccess, storedAfter: 8},
		{name: "create from a template before the modes", stored: 0, fixture: "create_before_modes", count: "8", status: cfn.StatusSuccess, storedAfter: 8,
			modeAfter: outbox.DeleteMode},
		{name: "create in watermark mode", stored: 0, fixture: "create", count: "8", mode: "watermark", hours: "72", status: cfn.StatusSuccess, storedAfter: 8,
			modeAfter: outbox.WatermarkMode, retentionAfter: 72 * time.Hour},
		{name: "delete mode ignores the retention", stored: 0, fixture: "create", count: "8", mode: "delete", hours: "72", status: cfn.StatusSuccess, storedAfter: 8,
			modeAfter: outbox.DeleteMode},
		{name: "update to watermark on an empty outbox", stored: 8, fixture: "update", count: "8", old: "8", mode: "watermark", hours: "48",
			status: cfn.StatusSuccess, storedAfter: 8, modeAfter: outbox.WatermarkMode, retentionAfter: 48 * time.Hour},
		{name: "update to watermark refused while messages are pending", stored: 8, pending: true, fixture: "update", count: "8", old: "8", mode: "watermark",
			status: cfn.StatusFailed, reason: []string{"OutboxMode stays delete", "asks for watermark", "pending"}, storedAfter: 8, modeAfter: outbox.DeleteMode},
		{name: "update of the retention while messages are pending", stored: 8, storedW: true, pending: true, fixture: "update", count: "8", old: "8",
			mode: "watermark", hours: "6", status: cfn.StatusSuccess, storedAfter: 8, modeAfter: outbox.WatermarkMode, retentionAfter: 6 * time.Hour},
		{name: "a bad mode", stored: 8, fixture: "update", count: "8", old: "8", mode: "archive",
			status: cfn.StatusFailed, reason: []string{"Mode=archive", "delete or watermark"}, storedAfter: 8, modeAfter: outbox.DeleteMode},
		{name: "a retention of zero hours", stored: 8, fixture: "update", count: "8", old: "8", mode: "watermark", hours: "0",
			status: cfn.StatusFailed, reason: []string{"RetentionHours=0", "at least 1"}, storedAfter: 8, modeAfter: outbox.DeleteMode},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			invoke := ctx
			if c.short {
				var cancel context.CancelFunc
				invoke, cancel = context.WithTimeout(ctx, deadlineMargin+dynamo.DefaultChangeMargin+3*time.Second)
				defer cancel()
			}
			tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
			if c.stored >= 0 {
				// The stack's tables (CreateTables makes the same ones),
				// without the config item when stored is 0.
				opts := []dynamo.TablesOption{dynamo.BucketCount(max(c.stored, 1))}
				if c.storedW {
					opts = append(opts, dynamo.WithMode(outbox.WatermarkMode))
				}
				if err := dynamo.CreateTables(ctx, d.Client, tables, opts...); err != nil {
					t.Fatal(err)
				}
				if c.pending {
					w, err := dynamo.NewWriter(ctx, d.Client, tables)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte("order-1"), Value: []byte("{}")}); err != nil {
						t.Fatal(err)
					}
				}
				if c.draining != 0 {
					res, err := dynamo.ChangeBucketCount(ctx, d.Client, tables, c.draining, dynamo.ChangeTimeout(100*time.Millisecond))
					if err != nil || res.Ended {
						t.Fatalf("the previous change: %+v, %v; want it made, its old epoch draining", res, err)
					}
				}
				if c.stored == 0 {
					if _, err := d.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &tables.Control,
						Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "config"}, "sk": &types.AttributeValueMemberS{Value: "config"}}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, url := newResponses(t)
			mode, hours := cmp.Or(c.mode, "delete"), cmp.Or(c.hours, "24")
			ev := event(t, c.fixture, map[string]string{
				"ResponseURL": url, "MessagesTable": tables.Messages, "ControlTable": tables.Control,
				"BucketCount": c.count, "OldBucketCount": c.old, "Mode": mode, "RetentionHours": hours, "OldMode": "delete", "OldRetentionHours": "24",
			})
			if _, err := cfn.LambdaWrap(NewHandler(d.Client, log).Handle)(invoke, ev); err != nil {
				t.Fatalf("the response was not delivered: %v", err)
			}
			if len(got.reqs) != 1 {
				t.Fatalf("the response URL got %d requests, want 1", len(got.reqs))
			}
			r := got.reqs[0]
			if r.method != http.MethodPut {
				t.Errorf("method %s, want PUT", r.method)
			}
			if r.body.Status != c.status {
				t.Errorf("Status %s (Reason %q), want %s", r.body.Status, r.body.Reason, c.status)
			}
			if r.body.Status == cfn.StatusFailed {
				t.Logf("Reason: %s", r.body.Reason)
			}
			for _, want := range c.reason {
				if !strings.Contains(r.body.Reason, want) {
					t.Errorf("Reason %q does not say %q", r.body.Reason, want)
				}
			}
			if c.status == cfn.StatusSuccess && r.body.Reason != "" {
				t.Errorf("Reason %q on success", r.body.Reason)
			}
			wantID := "outbox-config:" + tables.Control
			if c.physicalID == "request" {
				wantID = ev.RequestID
			}
			if r.body.PhysicalResourceID != wantID {
				t.Errorf("PhysicalResourceId %q, want %q", r.body.PhysicalResourceID, wantID)
			}
			if r.body.RequestID != ev.RequestID || r.body.StackID != ev.StackID || r.body.LogicalResourceID != ev.LogicalResourceID {
				t.Errorf("the response does not echo the request's ids: %s", r.raw)
			}
			if len(r.raw) > 4096 {
				t.Errorf("the response is %d bytes; CloudFormation accepts 4096", len(r.raw))
			}
			if c.status == cfn.StatusSuccess && ev.RequestType != cfn.RequestDelete {
				// The answer's digest is the stored item's: the functions'
				// restart trigger follows what they will read.
				if got, want := r.body.Data[attrDigest], configDigest(readConfig(t, d.Client, tables)); got != want {
					t.Errorf("%s %v, want %s, the digest of the stored config item", attrDigest, got, want)
				}
			}
			if c.storedAfter > 0 {
				cfg := readConfig(t, d.Client, tables)
				if cfg.BucketCount != c.storedAfter {
					t.Errorf("the config item says %d buckets, want %d", cfg.BucketCount, c.storedAfter)
				}
				if c.modeAfter != 0 || c.mode != "" || c.fixture == "create_before_modes" {
					if cfg.Mode != c.modeAfter || cfg.Retention != c.retentionAfter {
						t.Errorf("the config item says %v mode, retention %v; want %v, %v", cfg.Mode, cfg.Retention, c.modeAfter, c.retentionAfter)
					}
				}
			}
		})
	}
}

// The digest the functions' environment carries (OUTBOX_CONFIG_DIGEST)
// changes with every setting processes read only at start, and with
// nothing they follow while running: a stack update restarts the
// functions exactly when they would otherwise run on a stale setting.
func TestConfigDigest(t *testing.T) {
	base := outbox.Config{BucketCount: 8, Mode: outbox.DeleteMode, Topics: []string{"a", "b"}}
	restart := map[string]func(*outbox.Config){
		"mode":            func(c *outbox.Config) { c.Mode, c.Retention = outbox.WatermarkMode, 24*time.Hour },
		"retention":       func(c *outbox.Config) { c.Retention = time.Hour },
		"topics":          func(c *outbox.Config) { c.Topics = []string{"a"} },
		"MaxMessageBytes": func(c *outbox.Config) { c.MaxMessageBytes = 2 << 20 },
		"id header":       func(c *outbox.Config) { c.Headers.MessageID = "x-id" },
		"bucket header":   func(c *outbox.Config) { c.Headers.Bucket = "x-b" },
		"sequence header": func(c *outbox.Config) { c.Headers.Sequence = "x-s" },
		"regions":         func(c *outbox.Config) { c.Regions = []string{"us-east-1", "eu-west-1"} },
	}
	for name, change := range restart {
		c := base
		change(&c)
		if configDigest(c) == configDigest(base) {
			t.Errorf("%s changed, the digest did not: the functions would keep running on the old value", name)
		}
	}
	same := map[string]func(*outbox.Config){
		"BucketCount (followed online)": func(c *outbox.Config) { c.BucketCount, c.BucketEpoch = 16, 1 },
		"takeovers (re-read)":           func(c *outbox.Config) { c.TakenOver = map[string]string{"eu-west-1": "us-east-1"} },
		"the topics' order":             func(c *outbox.Config) { c.Topics = []string{"b", "a"} },
		"defaults stated": func(c *outbox.Config) {
			c.MaxMessageBytes, c.Headers = outbox.DefaultMaxMessageBytes, c.SharedHeaders()
		},
	}
	for name, change := range same {
		c := base
		change(&c)
		if configDigest(c) != configDigest(base) {
			t.Errorf("%s changed the digest: a needless restart of every function", name)
		}
	}
}

func TestPropertiesNameEveryProblem(t *testing.T) {
	_, _, err := properties(map[string]any{"BucketCount": 2.5, "Mode": "watermark", "RetentionHours": "a day"})
	for _, want := range []string{"MessagesTable is required", "ControlTable is required", "BucketCount=2.5", `RetentionHours="a day"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
	tables, c, err := properties(map[string]any{"MessagesTable": "m", "ControlTable": "c", "BucketCount": " 12 "})
	if err != nil || !reflect.DeepEqual(c, outbox.Config{BucketCount: 12}) || tables != (dynamo.Tables{Messages: "m", Control: "c"}) {
		t.Errorf("properties = %+v %+v %v", tables, c, err)
	}
	_, c, err = properties(map[string]any{"MessagesTable": "m", "ControlTable": "c", "BucketCount": "12", "Mode": " watermark "})
	if err != nil || !reflect.DeepEqual(c, outbox.Config{BucketCount: 12, Mode: outbox.WatermarkMode, Retention: 24 * time.Hour}) {
		t.Errorf("watermark without RetentionHours: %+v %v; want 24 h", c, err)
	}
}

func TestTruncateKeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 10) // 20 bytes
	if got := truncate(s, 5); got != "éé…" {
		t.Errorf("truncate = %q", got)
	}
	if got := truncate("short", 10); got != "short" {
		t.Errorf("truncate = %q", got)
	}
}

// The Topics property is the stack's comma-separated list, each name
// checked; an empty one means any topic.
func TestPropertiesTopics(t *testing.T) {
	base := func(topics any) map[string]any {
		return map[string]any{"MessagesTable": "m", "ControlTable": "c", "BucketCount": "4", "Topics": topics}
	}
	if _, c, err := properties(base(" orders, audit ,")); err != nil || !reflect.DeepEqual(c.Topics, []string{"orders", "audit"}) {
		t.Errorf("Topics: %+v %v; want orders, audit", c, err)
	}
	if _, c, err := properties(base("")); err != nil || len(c.Topics) != 0 {
		t.Errorf("empty Topics: %+v %v; want none (any topic)", c, err)
	}
	if _, _, err := properties(base("orders,order events")); err == nil || !strings.Contains(err.Error(), "Topics") {
		t.Errorf("a topic Kafka refuses: err = %v, want one naming Topics", err)
	}
}

// The stack's MaxMessageBytes goes into the config item, where every
// component reads it; out of range is refused naming it; absent (an older
// stack) leaves it unset.
func TestPropertiesMaxMessageBytes(t *testing.T) {
	base := func(extra map[string]any) map[string]any {
		p := map[string]any{"MessagesTable": "m", "ControlTable": "c", "BucketCount": "4"}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	if _, c, err := properties(base(map[string]any{"MaxMessageBytes": "2097152"})); err != nil || c.MaxMessageBytes != 2<<20 {
		t.Errorf("MaxMessageBytes: %+v %v; want 2097152", c, err)
	}
	if _, c, err := properties(base(nil)); err != nil || c.MaxMessageBytes != 0 {
		t.Errorf("absent: %+v %v; want 0 (the stored value is kept)", c, err)
	}
	if _, _, err := properties(base(map[string]any{"MaxMessageBytes": "12"})); err == nil || !strings.Contains(err.Error(), "MaxMessageBytes") {
		t.Errorf("12 bytes: err = %v, want one naming MaxMessageBytes", err)
	}
}

// The Regions property puts the outbox in region mode; an update keeps the
// config item's takeovers (written by outbox regions takeover, never by the
// stack), and an older stack without the property keeps the stored list.
func TestRegionsProperty(t *testing.T) {
	d := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(4), dynamo.Regions("us-east-1", "eu-west-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamo.TakeOver(ctx, d.Client, tables, "us-east-1", "eu-west-1"); err != nil {
		t.Fatal(err)
	}
	h := NewHandler(d.Client, slog.New(slog.DiscardHandler))
	props := map[string]any{"MessagesTable": tables.Messages, "ControlTable": tables.Control, "BucketCount": "4", "Regions": "us-east-1,eu-west-1"}
	for _, p := range []map[string]any{props, {"MessagesTable": tables.Messages, "ControlTable": tables.Control, "BucketCount": "4"}} {
		if _, _, err := h.Handle(ctx, cfn.Event{RequestType: cfn.RequestUpdate, ResourceProperties: p}); err != nil {
			t.Fatalf("update with %v: %v", p, err)
		}
		c := readConfig(t, d.Client, tables)
		if !reflect.DeepEqual(c.Regions, []string{"us-east-1", "eu-west-1"}) || c.TakenOver["us-east-1"] != "eu-west-1" {
			t.Errorf("after an update with %v: regions %v, takeovers %v; want both kept", p, c.Regions, c.TakenOver)
		}
	}
	for _, bad := range []string{"us-east-1,eu-west-1,ap-south-1", "US-EAST-1,eu-west-1"} {
		if _, _, err := properties(map[string]any{"MessagesTable": "m", "ControlTable": "c", "BucketCount": "4", "Regions": bad}); err == nil || !strings.Contains(err.Error(), "Regions") {
			t.Errorf("Regions %q: err = %v, want one naming Regions", bad, err)
		}
	}
}

// Tables attach (a region-mode stack on another region's replicas) writes
// nothing: it waits for the replicated config item, refuses it unless it
// says what the stack says, and answers the messages stream's ARN for the
// relay's event source. A region outside Regions, or attach outside region
// mode, is refused at deploy.
func TestAttach(t *testing.T) {
	d := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(4), dynamo.Regions("us-east-1", "eu-west-1")); err != nil {
		t.Fatal(err)
	}
	desc, err := d.Client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &tables.Messages})
	if err != nil {
		t.Fatal(err)
	}
	// Another outbox, whose messages table this control table must not be
	// attached with.
	other := dynamo.Tables{Messages: testenv.Name(t, "othermsgs"), Control: testenv.Name(t, "otherctl")}
	if err := dynamo.CreateTables(ctx, d.Client, other, dynamo.BucketCount(4), dynamo.Regions("us-east-1", "eu-west-1")); err != nil {
		t.Fatal(err)
	}
	before := readConfig(t, d.Client, tables)
	// DynamoDB Local has no global tables: the replicas are what the
	// Tables global stack makes, written into DescribeTable's answer.
	replicated := &replicaClient{StoreAPI: d.Client, describe: func(d *types.TableDescription) { d.Replicas = replicas("us-east-1", "eu-west-1") }}
	h := NewHandler(replicated, slog.New(slog.DiscardHandler))
	h.attachPoll = 20 * time.Millisecond
	props := func(extra map[string]any) map[string]any {
		p := map[string]any{"MessagesTable": tables.Messages, "ControlTable": tables.Control, "BucketCount": "4", "Mode": "delete",
			"RetentionHours": "24", "MaxMessageBytes": "1048576", "Topics": "", "Regions": "us-east-1,eu-west-1", "Tables": "attach", "Region": "eu-west-1"}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	for _, c := range []struct {
		name     string
		extra    map[string]any
		describe func(*types.TableDescription) // nil: replicas in both regions
		reason   []string                      // "" = accepted
	}{
		{name: "matching", extra: nil},
		{name: "another BucketCount", extra: map[string]any{"BucketCount": "8"}, reason: []string{"BucketCount: the stack says 8, the config item 4", "same values"}},
		{name: "another Regions order", extra: map[string]any{"Regions": "eu-west-1,us-east-1"}, reason: []string{"Regions: the stack says eu-west-1,us-east-1"}},
		{name: "another mode", extra: map[string]any{"Mode": "watermark"}, reason: []string{"OutboxMode: the stack says watermark"}},
		{name: "a region not in the list", extra: map[string]any{"Region": "ap-south-1"}, reason: []string{"region ap-south-1 is not one of Regions us-east-1,eu-west-1"}},
		{name: "attach without region mode", extra: map[string]any{"Regions": ""}, reason: []string{"Tables=attach is region mode's"}},
		{name: "global without region mode", extra: map[string]any{"Regions": "", "Tables": "global"}, reason: []string{"Tables=global is region mode's"}},
		{name: "a bad Tables", extra: map[string]any{"Tables": "borrow"}, reason: []string{"Tables=borrow", "create, global or attach"}},
		{name: "tables that do not exist", extra: map[string]any{"MessagesTable": "nope-m", "ControlTable": "nope-c"}, reason: []string{"deploy the Tables global stack first"}},
		{name: "another outbox's messages table", extra: map[string]any{"MessagesTable": other.Messages},
			reason: []string{"belongs to messages table " + tables.Messages}},
		{name: "a plain table of the same name", describe: func(d *types.TableDescription) { d.Replicas = nil },
			reason: []string{"the messages table " + tables.Messages + " in eu-west-1 is not a global table replica", "a plain table of the same name is not one"}},
		{name: "replicas not in every region", describe: func(d *types.TableDescription) { d.Replicas = replicas("eu-west-1", "ap-south-1") },
			reason: []string{"none in us-east-1 of Regions us-east-1,eu-west-1", "add the replicas"}},
		{name: "this region's replica implied", describe: func(d *types.TableDescription) { d.Replicas = replicas("us-east-1") }},
		{name: "a stream of another view", describe: func(d *types.TableDescription) {
			d.Replicas = replicas("us-east-1", "eu-west-1")
			d.StreamSpecification = &types.StreamSpecification{StreamEnabled: new(true), StreamViewType: types.StreamViewTypeNewImage}
		}, reason: []string{"no KEYS_ONLY stream in this region"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := h
			if c.describe != nil {
				h = NewHandler(&replicaClient{StoreAPI: d.Client, describe: c.describe}, slog.New(slog.DiscardHandler))
			}
			_, data, err := h.Handle(ctx, cfn.Event{RequestType: cfn.RequestCreate, ResourceProperties: props(c.extra)})
			if len(c.reason) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if data["MessagesStreamArn"] != *desc.Table.LatestStreamArn || data["MessagesTable"] != tables.Messages || data["BucketCount"] != "4" {
					t.Errorf("data = %v, want the stream %s, the table and BucketCount 4", data, *desc.Table.LatestStreamArn)
				}
				if want := configDigest(readConfig(t, d.Client, tables)); data[attrDigest] != want {
					t.Errorf("%s %v, want %s, the digest of the replicated config item", attrDigest, data[attrDigest], want)
				}
			} else {
				if err == nil {
					t.Fatalf("accepted, want a refusal saying %q", c.reason)
				}
				for _, r := range c.reason {
					if !strings.Contains(err.Error(), r) {
						t.Errorf("reason %q does not say %q", err, r)
					}
				}
			}
			if after := readConfig(t, d.Client, tables); !reflect.DeepEqual(after, before) {
				t.Errorf("the config item changed: %+v, was %+v", after, before)
			}
		})
	}

	// The config item has not replicated yet: the stack waits for it, and
	// fails at its deadline naming what to deploy first.
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "config"}, "sk": &types.AttributeValueMemberS{Value: "config"}}
	item, err := d.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &tables.Control, Key: key, ConsistentRead: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &tables.Control, Key: key}); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, deadlineMargin+200*time.Millisecond)
	defer cancelShort()
	if _, _, err := h.Handle(short, cfn.Event{RequestType: cfn.RequestCreate, ResourceProperties: props(nil)}); err == nil || !strings.Contains(err.Error(), "no config item") {
		t.Errorf("without a config item: err = %v, want one saying there is no config item", err)
	}
	// It arrives while the stack waits (after the stack's first read has
	// missed it: the gate is the read the handler makes, counted below).
	reads := &countingClient{StoreAPI: replicated, getItem: make(chan struct{}, 100)}
	hw := NewHandler(reads, slog.New(slog.DiscardHandler))
	hw.attachPoll = 20 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, _, err := hw.Handle(ctx, cfn.Event{RequestType: cfn.RequestCreate, ResourceProperties: props(nil)})
		done <- err
	}()
	<-reads.getItem // the first read found nothing
	if _, err := d.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &tables.Control, Item: item.Item}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("with the config item replicated while it waits: %v", err)
	}
	// Exactly what the template's SetupRole grants with Tables attach
	// (deploy's TestAttachSetupPolicy): no write.
	want := map[string]bool{"GetItem " + tables.Control: true, "DescribeTable " + tables.Messages: true}
	if !reflect.DeepEqual(reads.calls, want) {
		t.Errorf("attach called %v, want exactly %v", reads.calls, want)
	}
}

// replicaClient answers DescribeTable with the description changed by
// describe: the replicas and stream DynamoDB Local cannot make.
type replicaClient struct {
	dynamo.StoreAPI
	describe func(*types.TableDescription)
}

func (c *replicaClient) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	out, err := c.StoreAPI.DescribeTable(ctx, in, optFns...)
	if err == nil && out.Table != nil {
		c.describe(out.Table)
	}
	return out, err
}

func replicas(regions ...string) []types.ReplicaDescription {
	var rs []types.ReplicaDescription
	for _, r := range regions {
		rs = append(rs, types.ReplicaDescription{RegionName: new(r)})
	}
	return rs
}

// countingClient signals every GetItem it has answered and records the
// (action, table) of every call the attach path may make, and of every
// write it must not.
type countingClient struct {
	dynamo.StoreAPI
	getItem chan struct{}
	mu      sync.Mutex
	calls   map[string]bool
}

func (c *countingClient) note(action string, table *string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]bool{}
	}
	c.calls[action+" "+*table] = true
}

func (c *countingClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.note("GetItem", in.TableName)
	out, err := c.StoreAPI.GetItem(ctx, in, optFns...)
	select {
	case c.getItem <- struct{}{}:
	default:
	}
	return out, err
}

func (c *countingClient) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	c.note("DescribeTable", in.TableName)
	return c.StoreAPI.DescribeTable(ctx, in, optFns...)
}

func (c *countingClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.note("PutItem", in.TableName)
	return c.StoreAPI.PutItem(ctx, in, optFns...)
}

func (c *countingClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.note("UpdateItem", in.TableName)
	return c.StoreAPI.UpdateItem(ctx, in, optFns...)
}

func (c *countingClient) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.note("Query", in.TableName)
	return c.StoreAPI.Query(ctx, in, optFns...)
}
