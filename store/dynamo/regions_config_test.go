package dynamo

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
)

// The config item carries the regions and takeovers (format version 3, so
// that older code refuses it), and every constructor checks a process's
// region against them with a typed error, writing nothing.
func TestRegionModeConfig(t *testing.T) {
	ctx := ctxT(t)
	d, tables := newTables(t, BucketCount(8), Regions("us-east-1", "eu-west-1"))
	client := replicated{Client: d.Client, table: tables.Messages}
	st, err := NewStore(ctx, client, tables)
	if err != nil {
		t.Fatalf("NewStore in region mode on a global table: %v", err)
	}
	c, err := st.Config(ctx)
	if err != nil || !slices.Equal(c.Regions, []string{"us-east-1", "eu-west-1"}) || len(c.TakenOver) != 0 {
		t.Fatalf("Config = %+v, %v", c, err)
	}
	_, item, err := readConfigItem(ctx, d.Client, tables.Control)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := intAttr(item, attrVersion, true); v != configV3 {
		t.Errorf("region-mode config item has version %d, want %d", v, configV3)
	}

	var me *outbox.MisconfigurationError
	for _, tc := range []struct {
		name string
		opts []WriterOption
	}{{"no region", nil}, {"unlisted", []WriterOption{Region("ap-south-1")}}} {
		if _, err := NewWriter(ctx, client, tables, tc.opts...); !errors.As(err, &me) || me.Setting != "Region" {
			t.Errorf("NewWriter, %s: %v, want a *MisconfigurationError for Region", tc.name, err)
		}
	}
	var oe *outbox.OptionError
	if _, err := NewWriter(ctx, client, tables, Region("EU WEST")); !errors.As(err, &oe) || oe.Option != "Region" {
		t.Errorf("NewWriter(Region(invalid)) = %v, want an *OptionError", err)
	}
	// A writer of eu-west-1 with a client of us-east-1 would reserve
	// eu-west-1's numbers in us-east-1's replica: refused, nothing written.
	var re *sequence.RegionError
	if _, err := NewWriter(ctx, client, tables, Region("eu-west-1")); !errors.As(err, &re) || re.Region != "eu-west-1" || re.ClientRegion != d.Config.Region ||
		!errors.As(err, &me) || me.Setting != "Region" {
		t.Errorf("NewWriter(Region(eu-west-1)) with a client for %s = %v, want a *sequence.RegionError", d.Config.Region, err)
	}
	for b := range 8 {
		if n, err := sequence.Last(ctx, d.Client, tables.Control, b); err != nil || n != 0 {
			t.Fatalf("bucket %d's counter after the refused writer: %d, %v", b, n, err)
		}
	}
	// eu-west-1's writer, on its replica (DynamoDB Local keeps each
	// region's tables apart).
	euClient := d.InRegion("eu-west-1")
	if err := CreateTables(ctx, euClient, tables, BucketCount(8), Regions("us-east-1", "eu-west-1")); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(ctx, replicated{Client: euClient, table: tables.Messages}, tables, Region("eu-west-1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		res, err := w.Write(ctx, nil, outbox.Message{Topic: "t", Key: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if b := res.Messages[0].Bucket; b < 4 || b > 7 {
			t.Fatalf("region eu-west-1 wrote bucket %d, outside its slice 4..7", b)
		}
	}

	// Another region list on a non-empty outbox is refused; the same one
	// with another BucketCount that the regions do not divide too.
	var rce *RegionsChangeError
	if _, err := Configure(ctx, euClient, tables, outbox.Config{BucketCount: 8, Regions: []string{"eu-west-1", "us-east-1"}}); !errors.As(err, &rce) {
		t.Errorf("Configure with the regions swapped, on a non-empty outbox = %v, want a *RegionsChangeError", err)
	}
	if _, err := Configure(ctx, d.Client, tables, outbox.Config{BucketCount: 9, Regions: []string{"us-east-1", "eu-west-1"}}); !errors.As(err, &oe) || oe.Option != "Regions" {
		t.Errorf("Configure with 9 buckets over 2 regions = %v, want an *OptionError for Regions", err)
	}

	// An online BucketCount change is refused in region mode, directly and
	// through Configure, and nothing is written.
	_, before, err := readConfigItem(ctx, d.Client, tables.Control)
	if err != nil {
		t.Fatal(err)
	}
	var rbe *RegionModeBucketCountError
	if _, err := ChangeBucketCount(ctx, d.Client, tables, 16); !errors.As(err, &rbe) || rbe.Stored != 8 || rbe.Requested != 16 {
		t.Errorf("ChangeBucketCount(16) in region mode = %v, want a *RegionModeBucketCountError", err)
	}
	if _, err := Configure(ctx, d.Client, tables, outbox.Config{BucketCount: 16, Regions: []string{"us-east-1", "eu-west-1"}}); !errors.As(err, &rbe) {
		t.Errorf("Configure with 16 buckets in region mode = %v, want a *RegionModeBucketCountError", err)
	}
	if _, after, err := readConfigItem(ctx, d.Client, tables.Control); err != nil || !maps.EqualFunc(before, after, attrEqual) {
		t.Errorf("the refused changes wrote the config item: %v -> %v (%v)", before, after, err)
	}

	// Takeover and hand-back.
	if _, err := TakeOver(ctx, d.Client, tables, "us-east-1", "eu-west-1"); err != nil {
		t.Fatal(err)
	}
	if c, _ = st.Config(ctx); !maps.Equal(c.TakenOver, map[string]string{"us-east-1": "eu-west-1"}) {
		t.Errorf("after TakeOver, TakenOver = %v", c.TakenOver)
	}
	for _, bad := range [][2]string{{"us-east-1", "us-east-1"}, {"ap-south-1", "eu-west-1"}} {
		if _, err := TakeOver(ctx, d.Client, tables, bad[0], bad[1]); !errors.As(err, &oe) {
			t.Errorf("TakeOver(%s, %s) = %v, want an *OptionError", bad[0], bad[1], err)
		}
	}
	if _, err := TakeOver(ctx, d.Client, tables, "eu-west-1", "us-east-1"); err != nil {
		t.Fatal(err) // the taker fails in turn: everything moves to us-east-1
	}
	if c, _ = st.Config(ctx); !maps.Equal(c.TakenOver, map[string]string{"eu-west-1": "us-east-1"}) {
		t.Errorf("after the taker was taken over, TakenOver = %v, want only eu-west-1 → us-east-1", c.TakenOver)
	}
	if _, err := HandBack(ctx, d.Client, tables, "eu-west-1"); err != nil {
		t.Fatal(err)
	}
	if c, _ = st.Config(ctx); len(c.TakenOver) != 0 {
		t.Errorf("after HandBack, TakenOver = %v", c.TakenOver)
	}

	// A single-region outbox refuses a writer's region.
	d2, single := newTables(t, BucketCount(4))
	if _, err := NewWriter(ctx, d2.Client, single, Region("us-east-1")); !errors.As(err, &me) || me.Setting != "Region" {
		t.Errorf("NewWriter(Region) on a single-region outbox = %v, want a *MisconfigurationError", err)
	}
	if _, err := TakeOver(ctx, d2.Client, single, "a", "b"); !errors.As(err, &oe) {
		t.Errorf("TakeOver on a single-region outbox = %v, want an *OptionError", err)
	}
}

// resendClient applies the config item's update and then loses its
// response once: the SDK sends it again, and the second, conditional on the
// item as first read, fails.
type resendClient struct {
	*dynamodb.Client
	lost bool
}

func (c *resendClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := c.Client.UpdateItem(ctx, in, o...)
	if err == nil && !c.lost {
		c.lost = true
		return c.Client.UpdateItem(ctx, in, o...) // the resend, after the first applied
	}
	return out, err
}

// A takeover whose response was lost and resent is reported done, not as
// a concurrent change.
func TestTakeOverSurvivesAResend(t *testing.T) {
	ctx := ctxT(t)
	d, tables := newTables(t, BucketCount(4), Regions("a", "b"))
	client := &resendClient{Client: d.Client}
	if _, err := TakeOver(ctx, client, tables, "a", "b"); err != nil {
		t.Fatalf("TakeOver with its update resent: %v", err)
	}
	if !client.lost {
		t.Fatal("the update was not resent")
	}
	client.lost = false
	if _, err := HandBack(ctx, client, tables, "a"); err != nil {
		t.Fatalf("HandBack with its update resent: %v", err)
	}
}
