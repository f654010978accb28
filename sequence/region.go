package sequence

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
)

// RegionError is a reservation refused in a region-mode outbox because it
// would write a counter item that another region's writers write: two
// regions adding to one counter item are resolved last-writer-wins by
// replication, so two messages get one sequence number and one overwrites
// the other. Nothing was reserved. It matches *outbox.MisconfigurationError
// (Setting "Region") with errors.As.
type RegionError struct {
	Bucket       int      // the bucket reserved in; -1 when refused at NewCounter
	Region       string   // this process's region
	ClientRegion string   // the DynamoDB client's region ("" when it does not say)
	Owner        string   // the region whose writers reserve in Bucket
	Regions      []string // the outbox's regions
}

func (e *RegionError) Error() string {
	if e.Bucket < 0 {
		return "sequence: " + e.fix()
	}
	return fmt.Sprintf("sequence: reserve in bucket %d: %s", e.Bucket, e.fix())
}

func (e *RegionError) fix() string {
	switch {
	case e.Owner == "" && e.Bucket >= 0:
		return fmt.Sprintf("the bucket is in no region's slice: it is beyond the outbox's BucketCount (regions %s)", strings.Join(e.Regions, ","))
	case e.ClientRegion == "":
		return fmt.Sprintf("the DynamoDB client does not say its region (it has no Options method), so a reservation of region %s "+
			"might write another region's replica: pass the *dynamodb.Client, or a wrapper that embeds it", e.Region)
	case e.ClientRegion != e.Region:
		return fmt.Sprintf("this process's region is %s but its DynamoDB client is for %s: a reservation would write %s's counters in %s's "+
			"replica, where replication keeps only one of two regions' writes (two messages with one sequence number, one lost); "+
			"give it a client for %s (aws.Config.Region), or the region of its client (dynamo.Region, OUTBOX_REGION)",
			e.Region, e.ClientRegion, e.Region, e.ClientRegion, e.Region)
	}
	return fmt.Sprintf("the bucket is in region %s's slice, whose counters only %s's writers write (this process is in %s): "+
		"reserve there from %s, against its tables with its region (OUTBOX_REGION=%s outbox replay); a region that took %s over drains "+
		"its slice but never reserves in it", e.Owner, e.Owner, e.Region, e.Owner, e.Owner, e.Owner)
}

// Unwrap makes a RegionError match *outbox.MisconfigurationError.
func (e *RegionError) Unwrap() error {
	return &outbox.MisconfigurationError{Setting: "Region", Configured: e.Region, Stored: strings.Join(e.Regions, ","), Fix: e.fix()}
}

// OutboxErrorClass: retrying does not change a region.
func (e *RegionError) OutboxErrorClass() outbox.ErrorClass { return outbox.Fatal }

// clientRegion is the region client sends to: its Options' (a
// *dynamodb.Client, or a wrapper that embeds one), "" when it does not say.
func clientRegion(client API) string {
	if o, ok := client.(interface{ Options() dynamodb.Options }); ok {
		return o.Options().Region
	}
	return ""
}

// checkRegion is NewCounter's region check: the process's region is the
// outbox's and its client's.
func (c *Counter) checkRegion() error {
	if err := outbox.CheckRegion(c.stored, c.region); err != nil {
		return err
	}
	if !c.stored.RegionMode() {
		return nil
	}
	if cr := clientRegion(c.client); cr != c.region {
		return &RegionError{Bucket: -1, Region: c.region, ClientRegion: cr, Regions: c.stored.Regions}
	}
	return nil
}

// owns is the region check at every reservation: bucket is in the
// process's region's slice.
func (c *Counter) owns(bucket int) error {
	if !c.stored.RegionMode() {
		return nil
	}
	if owner := c.stored.RegionOf(bucket); owner != c.region {
		return &RegionError{Bucket: bucket, Region: c.region, ClientRegion: c.region, Owner: owner, Regions: c.stored.Regions}
	}
	return nil
}
