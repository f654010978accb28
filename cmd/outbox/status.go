package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

var statusCommand = &command{
	name:    "status",
	summary: "every bucket's backlog, oldest age, head, gap, lease and dead letters",
	description: `Shows the outbox's config item, the relays that sent a heartbeat recently,
and for every bucket:

  PENDING  sequence numbers reserved but not yet decided: the bucket's counter
           minus its head. Fences and reservations whose writer has not
           committed (yet) are included, so this can exceed the messages stored.
  OLDEST   age of the first pending message (from its created-at); "?" when
           no message was found among the first pending numbers: they are
           fences, reservations not committed yet, or messages already
           published whose head was not written yet (see below)
  HEAD     the last sequence number published (or fenced); NEXT is the number
           the counter hands out next
  GAP      the missing sequence number the relays wait on, and since when
           (fenced after the relays' GapTimeout)
  LEASE    the relay holding the bucket and how long its lease has left, or
           how long ago it expired (a relay that died without letting go)
  PARKED   dead letters of the bucket (see outbox parked)
  REASON   why the bucket is stopped, as the relays recorded it: the class of
           the error, the message it stopped at, for how long and after how
           many failures, and the error (a topic that does not exist, a topic
           the relay may not write). It stays stopped until the cause is
           fixed or the message is parked (outbox park); "-" for none

In watermark mode published messages stay until their TTL (the outbox's
retention) removes them, and a RETAINED column follows HEAD:

  RETAINED the range a replay can still publish (outbox replay --from --to):
           from the lowest message still stored to the head, and the age of
           that message; fences and parked messages inside it are skipped

The head is written lazily: a relay that resumes a bucket it released
writes its head at most every HeadFlushInterval (5s), marking each
published message with a tombstone meanwhile, and the sweeper advances the
heads of quiet buckets. So right after a drain PENDING can count messages
that were published, with OLDEST "?"; status says so under the table. It
is not a backlog unless it lasts past the next sweep (a minute).

Reads are bounded, never a scan: per bucket a lease and a counter GetItem, a
COUNT query of its dead letters and, when something is pending, a query of at
most 100 keys (in watermark mode, also a query for the first retained
message, which reads past at most 10,000 fences); 16 buckets at a time.`,
	example: `outbox status --messages orders-outbox --control orders-outbox-control
outbox status --active --json | jq '.buckets[] | select(.pending > 0)'
outbox status --local --endpoint http://127.0.0.1:8000 --messages m --control c`,
	timeout: 2 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		asJSON := fs.Bool("json", false, "print JSON instead of a table (fields are only ever added)")
		bucket := fs.Int("bucket", -1, "show only this `BUCKET`")
		active := fs.Bool("active", false, "list only buckets with something pending or parked, a gap or a lease (totals still cover every bucket)")
		liveWithin := fs.Duration("live-within", 30*time.Second, "a relay is live if its heartbeat is this `DURATION` old or newer (the relays' lease duration)")
		return func(_ *app, _ *connection, args []string) (action, error) {
			if err := noArgs(args); err != nil {
				return nil, err
			}
			if *bucket < -1 || *bucket >= outbox.MaxBucketCount {
				return nil, usagef("--bucket %d: must be 0..%d", *bucket, outbox.MaxBucketCount-1)
			}
			if *liveWithin <= 0 {
				return nil, usagef("--live-within %v: must be positive", *liveWithin)
			}
			return func(ctx context.Context, a *app, s *session) error {
				rep, err := readStatus(ctx, s, a.now(), *bucket, *liveWithin)
				if err != nil {
					return err
				}
				if *active {
					rep.Buckets = activeOnly(rep.Buckets)
				}
				if *asJSON {
					return writeJSON(a.stdout, rep)
				}
				return rep.render(a.stdout)
			}, nil
		}
	},
}

func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// statusReport is `outbox status --json`. Fields are only ever added (a
// retained range, for one, when heads may lag behind published messages).
type statusReport struct {
	MessagesTable string         `json:"messages_table"`
	ControlTable  string         `json:"control_table"`
	At            time.Time      `json:"at"`
	Config        configStatus   `json:"config"`
	LiveRelays    relaysStatus   `json:"live_relays"`
	Totals        totalsStatus   `json:"totals"`
	Buckets       []bucketStatus `json:"buckets"`
	// Warnings are states that lose or strand messages if left alone.
	Warnings []string `json:"warnings"`
	// Notes explain a reading that looks wrong and is not (a lagging
	// head).
	Notes []string `json:"notes"`
}

type configStatus struct {
	BucketCount   int `json:"bucket_count"`
	FormatVersion int `json:"format_version"`
	// Mode is "delete" or "watermark"; RetentionSeconds is the watermark
	// mode's message retention (0 in delete mode).
	Mode             string `json:"mode"`
	RetentionSeconds int64  `json:"retention_seconds"`
	// Topics are the topics writers accept; empty means any topic.
	Topics []string `json:"topics"`
	// BucketEpoch counts the online BucketCount changes. While the old
	// epoch of the last change drains, OldBucketCount is its count,
	// OldBucketsDraining the old buckets not yet drained (the new messages
	// of their keys wait for them) and ChangeDeadline when it should have
	// drained. ChangingTo is the count of a change an older version began
	// and left frozen (0: none), which this version aborts.
	BucketEpoch        int64      `json:"bucket_epoch"`
	OldBucketCount     int        `json:"old_bucket_count,omitempty"`
	OldBucketsDraining []int      `json:"old_buckets_draining,omitempty"`
	ChangingTo         int        `json:"changing_to"`
	ChangeDeadline     *time.Time `json:"change_deadline,omitempty"`
	// Regions: region mode's regions, each with its buckets and the region
	// draining them (absent in the single-region mode).
	Regions []regionStatus `json:"regions,omitempty"`
}

type regionStatus struct {
	Region    string `json:"region"`
	From      int    `json:"first_bucket"`
	To        int    `json:"last_bucket"`
	DrainedBy string `json:"drained_by"`
}

// anyTopicWarning is said wherever an outbox with no topic list is shown.
const anyTopicWarning = "WARNING the outbox lists no topics, so writers accept any topic: a misspelt one is written, and its bucket stops at the relay " +
	"(outbox status shows why; outbox park moves the message aside). List them with the stack's Topics parameter or outbox init --topics."

type relaysStatus struct {
	WithinSeconds int64    `json:"within_seconds"`
	IDs           []string `json:"ids"`
}

type totalsStatus struct {
	Pending int64 `json:"pending"`
	Parked  int   `json:"parked"`
	// OldestPendingAt is the oldest of the buckets' first pending messages;
	// null when nothing is pending or no pending message was found.
	OldestPendingAt         *time.Time `json:"oldest_pending_at"`
	OldestPendingAgeSeconds *int64     `json:"oldest_pending_age_seconds"`
	Gaps                    int        `json:"gaps"`
	LeasesHeld              int        `json:"leases_held"`
	// Stopped counts the buckets with a stuck reason.
	Stopped int `json:"stopped"`
}

type bucketStatus struct {
	Bucket int `json:"bucket"`
	// Pending is counter − head: fences and uncommitted reservations
	// included.
	Pending                 int64      `json:"pending"`
	OldestPendingAt         *time.Time `json:"oldest_pending_at"`
	OldestPendingAgeSeconds *int64     `json:"oldest_pending_age_seconds"`
	Head                    int64      `json:"head"`
	Cleaned                 int64      `json:"cleaned"`
	NextSequence            int64      `json:"next_sequence"`
	Gap                     *gapStatus `json:"gap"`
	Lease                   *leaseInfo `json:"lease"`
	Parked                  int        `json:"parked"`
	// Retained is the range a replay can still publish, in watermark mode
	// (absent in delete mode, and when nothing is retained).
	Retained *retainedStatus `json:"retained,omitempty"`
	// Stuck is why the bucket is stopped, as the relays recorded it (null
	// when it is not, or nothing was recorded).
	Stuck *stuckStatus `json:"stuck"`
}

// stuckStatus is why a bucket is stopped: the permanent topic- or
// cluster-wide error its first pending message met.
type stuckStatus struct {
	Sequence  int64     `json:"sequence"`
	MessageID string    `json:"message_id"`
	Topic     string    `json:"topic"`
	Class     string    `json:"class"`
	Reason    string    `json:"reason"`
	Since     time.Time `json:"since"`
	// ForSeconds is how long since a relay first saw it stopped there.
	ForSeconds int64     `json:"for_seconds"`
	Last       time.Time `json:"last"`
	Count      int64     `json:"count"`
}

// retainedStatus is a watermark bucket's retained range: First..Last (the
// head). First is -1 when the first keys read were all fences (unknown).
type retainedStatus struct {
	First            int64      `json:"first"`
	Last             int64      `json:"last"`
	OldestAt         *time.Time `json:"oldest_at"`
	OldestAgeSeconds *int64     `json:"oldest_age_seconds"`
}

type gapStatus struct {
	Sequence   int64      `json:"sequence"`
	Since      *time.Time `json:"since"`
	AgeSeconds int64      `json:"age_seconds"`
}

type leaseInfo struct {
	Owner string `json:"owner"`
	// Released: Owner released the lease (it may drain the bucket again
	// without acquiring it); nobody holds it. Expires is then absent.
	Released bool       `json:"released,omitempty"`
	Expires  *time.Time `json:"expires,omitempty"`
	// Held: the lease has not expired. An expired lease that is still
	// recorded belongs to a relay that stopped without letting go; any
	// relay takes it over.
	Held bool `json:"held"`
	// ExpiresInSeconds is negative once expired.
	ExpiresInSeconds int64 `json:"expires_in_seconds"`
	Epoch            int64 `json:"epoch"`
}

// peekLimit bounds the keys read to find a bucket's first pending message.
const peekLimit = 100

// readStatus reads the config item, the live relays and every bucket (only
// bucket when it is not -1).
func readStatus(ctx context.Context, s *session, now time.Time, bucket int, liveWithin time.Duration) (*statusReport, error) {
	st, cfg, buckets, err := s.buckets(ctx, bucket)
	if err != nil {
		return nil, err
	}
	live, err := st.LiveRelays(ctx, now, liveWithin)
	if err != nil {
		return nil, err
	}
	var (
		changeDL *time.Time
		draining []int
	)
	if cfg.Draining() || cfg.Frozen() {
		d := cfg.ChangeDeadline.UTC()
		changeDL = &d
	}
	var drainErr error
	if cfg.Draining() {
		// It may cut an old counter nobody cut (a crashed changer), as a
		// writer would; without UpdateItem on the control table that
		// fails, and status says so instead of failing.
		if draining, drainErr = st.OldBucketsDraining(ctx, cfg); drainErr != nil {
			draining = nil // not known: every old bucket is listed
			for b := range cfg.OldBucketCount {
				draining = append(draining, b)
			}
		}
	}
	rep := &statusReport{
		MessagesTable: s.tables.Messages, ControlTable: s.tables.Control, At: now.UTC().Truncate(time.Millisecond),
		Config: configStatus{BucketCount: cfg.BucketCount, FormatVersion: cfg.FormatVersion, Mode: cfg.Mode.String(),
			RetentionSeconds: seconds(cfg.Retention), Topics: append([]string{}, cfg.Topics...),
			BucketEpoch: cfg.BucketEpoch, OldBucketCount: cfg.OldBucketCount, OldBucketsDraining: draining, ChangingTo: cfg.NextBucketCount,
			ChangeDeadline: changeDL, Regions: regionsOf(cfg)},
		LiveRelays: relaysStatus{WithinSeconds: seconds(liveWithin), IDs: append([]string{}, live...)},
		Buckets:    make([]bucketStatus, len(buckets)),
		Warnings:   []string{},
		Notes:      []string{},
	}
	if drainErr != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("could not tell which old buckets of the BucketCount change %d → %d still drain (%v); all are listed",
			cfg.OldBucketCount, cfg.BucketCount, drainErr))
	}
	err = eachBucket(ctx, buckets, func(ctx context.Context, i, b int) error {
		bs, err := readBucket(ctx, st, s.db, s.tables.Control, b, now, cfg.Mode == outbox.WatermarkMode)
		rep.Buckets[i] = bs
		return err
	})
	if err != nil {
		return nil, err
	}
	rep.total(now)
	return rep, nil
}

// buckets opens the outbox and returns its config and every bucket, or only
// bucket when it is not -1.
func (s *session) buckets(ctx context.Context, bucket int, opts ...dynamo.StoreOption) (*dynamo.Store, outbox.Config, []int, error) {
	st, err := s.store(ctx, opts...)
	if err != nil {
		return nil, outbox.Config{}, nil, err
	}
	cfg, err := st.Config(ctx)
	if err != nil {
		return nil, outbox.Config{}, nil, err
	}
	switch {
	case bucket >= cfg.BucketCount:
		return nil, cfg, nil, usagef("--bucket %d: the outbox has buckets 0..%d (BucketCount %d)", bucket, cfg.BucketCount-1, cfg.BucketCount)
	case bucket >= 0:
		return st, cfg, []int{bucket}, nil
	}
	all := make([]int, cfg.Span()) // the old buckets above the count too, while they drain
	for b := range all {
		all[b] = b
	}
	return st, cfg, all, nil
}

func readBucket(ctx context.Context, st *dynamo.Store, db *dynamodb.Client, control string, b int, now time.Time, watermark bool) (bucketStatus, error) {
	bs := bucketStatus{Bucket: b}
	// The lease first, then the counter: the counter only grows and a head
	// never passes it, so a counter read after the head is never below it.
	l, err := st.ReadLease(ctx, b)
	if err != nil {
		return bs, err
	}
	last, err := sequence.Last(ctx, db, control, b)
	if err != nil {
		return bs, err
	}
	if bs.Parked, err = st.CountParked(ctx, b); err != nil {
		return bs, err
	}
	bs.Head, bs.Cleaned, bs.NextSequence, bs.Pending = l.Head, l.Cleaned, last+1, last-l.Head
	if bs.Pending > 0 {
		_, oldest, err := st.Peek(ctx, b, l.Head, int(min(bs.Pending, peekLimit)))
		if err != nil {
			return bs, err
		}
		if !oldest.IsZero() {
			bs.OldestPendingAt = timePtr(oldest)
			bs.OldestPendingAgeSeconds = new(seconds(now.Sub(oldest)))
		}
	}
	if watermark {
		first, oldest, err := st.Retained(ctx, b, l.Head)
		if err != nil {
			return bs, err
		}
		if first != 0 {
			bs.Retained = &retainedStatus{First: first, Last: l.Head, OldestAt: timePtr(oldest)}
			if !oldest.IsZero() {
				bs.Retained.OldestAgeSeconds = new(seconds(now.Sub(oldest)))
			}
		}
	}
	if st := l.Stuck; st.Current(l.Head) {
		bs.Stuck = &stuckStatus{Sequence: st.Sequence, MessageID: st.MessageID, Topic: st.Topic, Class: st.Class.String(), Reason: st.Reason,
			Since: st.Since.UTC(), ForSeconds: seconds(now.Sub(st.Since)), Last: st.Last.UTC(), Count: st.Count}
	}
	if l.Gap > l.Head {
		bs.Gap = &gapStatus{Sequence: l.Gap, Since: timePtr(l.GapSince), AgeSeconds: seconds(now.Sub(l.GapSince))}
	}
	switch {
	case l.Released():
		bs.Lease = &leaseInfo{Owner: l.Owner, Released: true, Epoch: l.Epoch}
	case l.Owner != "":
		bs.Lease = &leaseInfo{Owner: l.Owner, Expires: timePtr(l.Expires), Held: l.Expires.After(now),
			ExpiresInSeconds: int64(l.Expires.Sub(now) / time.Second), Epoch: l.Epoch}
	}
	return bs, nil
}

func (r *statusReport) total(now time.Time) {
	var oldest time.Time
	for _, b := range r.Buckets {
		r.Totals.Pending += max(b.Pending, 0)
		r.Totals.Parked += b.Parked
		if b.OldestPendingAt != nil && (oldest.IsZero() || b.OldestPendingAt.Before(oldest)) {
			oldest = *b.OldestPendingAt
		}
		if b.Gap != nil {
			r.Totals.Gaps++
		}
		if b.Stuck != nil {
			r.Totals.Stopped++
		}
		if b.Lease != nil && b.Lease.Held {
			r.Totals.LeasesHeld++
		}
		if b.Pending > 0 && b.OldestPendingAgeSeconds == nil {
			r.Notes = append(r.Notes, fmt.Sprintf(
				"bucket %d: OLDEST \"?\": no message among the first pending numbers after head %d; they are fences, reservations not committed yet, "+
					"or messages published whose head was not written yet (heads are written lazily; the next drain or sweep moves it). "+
					"PENDING overstates the backlog until then; if it lasts past the next sweep, see outbox status --bucket %d",
				b.Bucket, b.Head, b.Bucket))
		}
		if b.Pending < 0 {
			r.Warnings = append(r.Warnings, fmt.Sprintf(
				"bucket %d: the counter (%d) is below the head (%d): the counter item was reset or deleted; "+
					"new messages there are taken for leftovers and deleted unpublished. Stop the writers and set n back to %d or more",
				b.Bucket, b.NextSequence-1, b.Head, b.Head))
		}
	}
	if !oldest.IsZero() {
		r.Totals.OldestPendingAt = timePtr(oldest)
		r.Totals.OldestPendingAgeSeconds = new(seconds(now.Sub(oldest)))
	}
}

func activeOnly(bs []bucketStatus) []bucketStatus {
	var out []bucketStatus
	for _, b := range bs {
		if b.Pending != 0 || b.Parked > 0 || b.Gap != nil || b.Lease != nil || b.Stuck != nil {
			out = append(out, b)
		}
	}
	return out
}

// render writes the report as text: a header, then one aligned row per
// bucket and a total. In watermark mode a RETAINED column follows HEAD.
func (r *statusReport) render(w io.Writer) error {
	relays := "none"
	if len(r.LiveRelays.IDs) > 0 {
		relays = strings.Join(r.LiveRelays.IDs, ", ")
	}
	watermark := r.Config.Mode == outbox.WatermarkMode.String()
	mode := r.Config.Mode + " mode"
	if watermark {
		mode += fmt.Sprintf(" (retention %s)", age(time.Duration(r.Config.RetentionSeconds)*time.Second))
	}
	fmt.Fprintf(w, "outbox   messages %s, control %s\n", r.MessagesTable, r.ControlTable)
	fmt.Fprintf(w, "config   BucketCount %d (epoch %d), format version %d, %s\n", r.Config.BucketCount, r.Config.BucketEpoch, r.Config.FormatVersion, mode)
	c := r.Config
	switch {
	case c.OldBucketCount != 0 && len(c.OldBucketsDraining) == 0:
		fmt.Fprintf(w, "change   BucketCount %d → %d: the old epoch drained; the sweeper (or buckets set %d) ends it\n", c.OldBucketCount, c.BucketCount, c.BucketCount)
	case c.OldBucketCount != 0 && c.ChangeDeadline.After(r.At):
		fmt.Fprintf(w, "change   BucketCount %d → %d: writers write under %d; old buckets %v still drain (by %s): the new messages of their keys wait for them\n",
			c.OldBucketCount, c.BucketCount, c.BucketCount, c.OldBucketsDraining, c.ChangeDeadline.Format(time.RFC3339))
	case c.OldBucketCount != 0:
		fmt.Fprintf(w, "change   BucketCount %d → %d: old buckets %v still drain %s past the deadline %s: the new messages of their keys wait "+
			"(are relays running? is a bucket stuck? see below; docs/failures.md)\n",
			c.OldBucketCount, c.BucketCount, c.OldBucketsDraining, age(r.At.Sub(*c.ChangeDeadline)), c.ChangeDeadline.Format(time.RFC3339))
	case c.ChangingTo != 0:
		fmt.Fprintf(w, "change   BucketCount %d → %d begun by an older version, frozen: its writers pause; this version aborts it when it meets it "+
			"(outbox buckets set, a relay's sweep, the sweeper, a Go writer)\n", c.BucketCount, c.ChangingTo)
	}
	fmt.Fprintf(w, "topics   %s\n", dynamo.TopicList(r.Config.Topics))
	if len(r.Config.Regions) > 0 {
		var parts []string
		for _, g := range r.Config.Regions {
			p := fmt.Sprintf("%s %d..%d", g.Region, g.From, g.To)
			if g.DrainedBy != g.Region {
				p += " (taken over by " + g.DrainedBy + ")"
			}
			parts = append(parts, p)
		}
		fmt.Fprintf(w, "regions  %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "relays   %d live (heartbeat within %s): %s\n", len(r.LiveRelays.IDs), age(time.Duration(r.LiveRelays.WithinSeconds)*time.Second), relays)
	fmt.Fprintf(w, "at       %s\n\n", r.At.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	retained := func(cell string) string {
		if !watermark {
			return ""
		}
		return cell + "\t"
	}
	fmt.Fprintf(tw, "BUCKET\tPENDING\tOLDEST\tHEAD\t%sNEXT\tGAP\tLEASE\tPARKED\tREASON\n", retained("RETAINED"))
	for _, b := range r.Buckets {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s%d\t%s\t%s\t%d\t%s\n",
			b.Bucket, b.Pending, oldestCell(b.Pending, b.OldestPendingAgeSeconds), b.Head, retained(retainedCell(b.Retained)), b.NextSequence,
			gapCell(b.Gap), leaseCell(b.Lease), b.Parked, reasonCell(b.Stuck))
	}
	fmt.Fprintf(tw, "total\t%d\t%s\t\t%s\t%s\t%s\t%d\t%s\n", r.Totals.Pending, oldestCell(r.Totals.Pending, r.Totals.OldestPendingAgeSeconds),
		retained(""), countCell(r.Totals.Gaps, "gap"), countCell(r.Totals.LeasesHeld, "held"), r.Totals.Parked, countCell(r.Totals.Stopped, "stopped"))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, warning := range r.Warnings {
		fmt.Fprintf(w, "\nWARNING %s\n", warning)
	}
	if len(r.Config.Topics) == 0 {
		fmt.Fprintf(w, "\n%s\n", anyTopicWarning)
	}
	for _, note := range r.Notes {
		fmt.Fprintf(w, "\nNOTE %s\n", note)
	}
	return nil
}

// retainedCell is "first..head (age of first)", "-" for nothing retained
// and "?..head" when the first retained message was not found among the
// first keys.
func retainedCell(r *retainedStatus) string {
	switch {
	case r == nil:
		return "-"
	case r.First < 0:
		return fmt.Sprintf("?..%d", r.Last)
	case r.OldestAgeSeconds == nil:
		return fmt.Sprintf("%d..%d", r.First, r.Last)
	}
	return fmt.Sprintf("%d..%d (%s)", r.First, r.Last, age(time.Duration(*r.OldestAgeSeconds)*time.Second))
}

func oldestCell(pending int64, ageSeconds *int64) string {
	switch {
	case ageSeconds != nil:
		return age(time.Duration(*ageSeconds) * time.Second)
	case pending > 0:
		return "?"
	}
	return "-"
}

// reasonWidth bounds the error in the REASON cell (--json has all of it).
const reasonWidth = 120

// reasonCell is "stopped at S for AGE (N failures): error", "-" for none.
func reasonCell(s *stuckStatus) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%s: stopped at %d for %s (%d failures): %s", s.Class, s.Sequence, age(time.Duration(s.ForSeconds)*time.Second), s.Count,
		clip(s.Reason, reasonWidth, false))
}

func gapCell(g *gapStatus) string {
	if g == nil {
		return "-"
	}
	if g.Since == nil {
		return strconv.FormatInt(g.Sequence, 10)
	}
	return fmt.Sprintf("%d for %s", g.Sequence, age(time.Duration(g.AgeSeconds)*time.Second))
}

// relayIDWidth bounds a relay id in the table (Lambda's are ~100 runes).
const relayIDWidth = 40

func leaseCell(l *leaseInfo) string {
	if l == nil {
		return "-"
	}
	owner := clip(l.Owner, relayIDWidth, true)
	if l.Released {
		return fmt.Sprintf("released by %s", owner)
	}
	if l.Held {
		return fmt.Sprintf("%s (%s left)", owner, age(time.Duration(l.ExpiresInSeconds)*time.Second))
	}
	return fmt.Sprintf("%s (expired %s ago)", owner, age(time.Duration(-l.ExpiresInSeconds)*time.Second))
}

func countCell(n int, what string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d %s", n, what)
}
