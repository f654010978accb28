package sequence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
)

// regionClient is a countingClient that says its region, as a
// *dynamodb.Client does.
type regionClient struct {
	countingClient
	region string
}

func (c *regionClient) Options() dynamodb.Options { return dynamodb.Options{Region: c.region} }

// In region mode a Counter refuses a process without a
// region, a client of another region or one that does not say, and a
// reservation outside the region's slice, each without a call to DynamoDB;
// in the default mode and in its own slice it reserves.
func TestForOutboxReservesOnlyInTheRegion(t *testing.T) {
	ctx := context.Background()
	regional := outbox.Config{BucketCount: 4, Regions: []string{"us-east-1", "eu-west-1"}} // eu-west-1: buckets 2..3
	var (
		me *outbox.MisconfigurationError
		re *sequence.RegionError
	)
	for _, tc := range []struct {
		name   string
		client sequence.API
		cfg    outbox.Config
		region string
		want   func(error) bool
	}{
		{"no region", &regionClient{region: "eu-west-1"}, regional, "",
			func(err error) bool { return errors.As(err, &me) && me.Setting == "Region" }},
		{"a region not listed", &regionClient{region: "ap-south-1"}, regional, "ap-south-1",
			func(err error) bool { return errors.As(err, &me) && me.Setting == "Region" }},
		{"a region on a single-region outbox", &regionClient{region: "eu-west-1"}, outbox.Config{BucketCount: 4}, "eu-west-1",
			func(err error) bool { return errors.As(err, &me) && me.Setting == "Region" }},
		{"a client of another region", &regionClient{region: "us-east-1"}, regional, "eu-west-1",
			func(err error) bool {
				return errors.As(err, &re) && re.ClientRegion == "us-east-1" && re.Region == "eu-west-1" && errors.As(err, &me)
			}},
		{"a client that does not say its region", &countingClient{}, regional, "eu-west-1",
			func(err error) bool { return errors.As(err, &re) && re.ClientRegion == "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := sequence.NewCounter(tc.client, "ctl", tc.cfg, tc.region); !tc.want(err) {
				t.Errorf("NewCounter: %v", err)
			}
		})
	}

	cc := &regionClient{region: "eu-west-1"}
	c, err := sequence.NewCounter(cc, "ctl", regional, "eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []int{0, 1, 4} {
		if _, err := c.Reserve(ctx, b, 1); !errors.As(err, &re) || re.Bucket != b || !errors.As(err, &me) {
			t.Errorf("Reserve in bucket %d, outside eu-west-1's slice: %v, want a *sequence.RegionError", b, err)
		}
	}
	if cc.calls != 0 {
		t.Fatalf("%d calls to DynamoDB for refused reservations", cc.calls)
	}
	if _, err := c.Reserve(ctx, 2, 1); cc.calls != 1 || errors.As(err, &re) {
		t.Errorf("Reserve in bucket 2, eu-west-1's: %d calls, %v", cc.calls, err)
	}
	// The default mode, without a region: no region check.
	if _, err := sequence.NewCounter(&countingClient{}, "ctl", outbox.Config{BucketCount: 4}, ""); err != nil {
		t.Errorf("NewCounter in the default mode: %v", err)
	}
}

// A Counter cannot be made without the outbox's config item, so none
// reserves on a region-mode outbox without the region check: the zero
// Config (what a caller that never read the config item has) is an
// *outbox.OptionError naming it, and nothing is reserved. With a
// region-mode config and no region it is refused too (above).
func TestCounterNeedsTheOutboxConfig(t *testing.T) {
	cc := &regionClient{region: "eu-west-1"}
	for _, cfg := range []outbox.Config{{}, {Regions: []string{"us-east-1", "eu-west-1"}}, {BucketCount: outbox.MaxBucketCount + 1}} {
		c, err := sequence.NewCounter(cc, "ctl", cfg, "")
		var oe *outbox.OptionError
		if !errors.As(err, &oe) || oe.Option != "stored" {
			t.Errorf("NewCounter with config %+v: %v, want an *outbox.OptionError about stored", cfg, err)
		}
		if c != nil {
			_, _ = c.Reserve(context.Background(), 0, 1)
		}
	}
	if cc.calls != 0 {
		t.Fatalf("%d reservations sent without the outbox's config", cc.calls)
	}
}
