package ddbmodel

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/internal/dynamoerr"
)

// A role names who calls (the bench's writers, the relay, ...): the model
// counts every call by its caller's role. In process the role rides on
// the context (WithRole); over HTTP, each role gets its own listener
// (Serve).

type roleKey struct{}

// WithRole returns ctx carrying the caller's role.
func WithRole(ctx context.Context, role string) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

func roleOf(ctx context.Context) string {
	r, _ := ctx.Value(roleKey{}).(string)
	return r
}

// OpCount is what one role's calls of one operation on one table did.
// Calls is every request the model answered (each HTTP attempt, the SDK's
// retries included); Throttled the calls refused whole or in part for a
// partition key's capacity (a batch's unprocessed items, a transaction's
// ThrottlingError); Errors the other failures (a failed condition, a
// cancelled transaction, a bad request); Units the capacity units
// consumed by DynamoDB's rules; Seconds the calls' summed latency, as the
// caller waited for it.
type OpCount struct {
	Calls     int64
	Throttled int64
	Errors    int64
	Units     float64
	Seconds   float64
}

type countKey struct{ role, op, table string }

type counts struct {
	mu sync.Mutex
	m  map[countKey]*OpCount
}

// callCount is what a call did, filled in by the operation.
type callCount struct {
	table     string             // the first table the call names
	units     map[string]float64 // by table
	throttled bool
}

func (c *callCount) charge(table string, u float64) {
	if c.table == "" {
		c.table = table
	}
	if c.units == nil {
		c.units = map[string]float64{}
	}
	c.units[table] += u
}

func (cs *counts) record(role, op string, c *callCount, err error, took time.Duration) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	get := func(table string) *OpCount {
		k := countKey{role, op, table}
		s, ok := cs.m[k]
		if !ok {
			s = &OpCount{}
			cs.m[k] = s
		}
		return s
	}
	s := get(c.table)
	s.Calls++
	s.Seconds += took.Seconds()
	switch {
	case c.throttled || isThrottle(err):
		s.Throttled++
	case err != nil:
		s.Errors++
	}
	for t, u := range c.units {
		get(t).Units += u
	}
}

func isThrottle(err error) bool {
	var pt *types.ProvisionedThroughputExceededException
	return errors.As(err, &pt)
}

// OpTable names one operation on one table.
type OpTable struct{ Op, Table string }

// Counts returns role's counts by operation and table.
func (db *DB) Counts(role string) map[OpTable]OpCount {
	db.counts.mu.Lock()
	defer db.counts.mu.Unlock()
	out := map[OpTable]OpCount{}
	for k, v := range db.counts.m {
		if k.role == role {
			out[OpTable{k.op, k.table}] = *v
		}
	}
	return out
}

// ResetCounts forgets role's counts.
func (db *DB) ResetCounts(role string) {
	db.counts.mu.Lock()
	defer db.counts.mu.Unlock()
	for k := range db.counts.m {
		if k.role == role {
			delete(db.counts.m, k)
		}
	}
}

// call runs one operation as DynamoDB would answer it: half the call's
// latency, the operation under the model's lock at one instant, the other
// half. A context ended during the first half ends the call with nothing
// done; during the second, the caller gets the context's error while the
// call took effect (as a lost response would).
func (db *DB) call(ctx context.Context, op string, fn func(now time.Time, c *callCount) error) error {
	began := time.Now()
	d := db.cfg.Latency
	if o, ok := db.cfg.OpLatency[op]; ok {
		d = o
	}
	lat := d.Sample()
	if err := sleep(ctx, lat/2); err != nil {
		return err
	}
	var c callCount
	db.mu.Lock()
	err := fn(db.cfg.Now(), &c)
	db.mu.Unlock()
	if serr := sleep(ctx, lat-lat/2); serr != nil && err == nil {
		err = serr
	}
	db.counts.record(roleOf(ctx), op, &c, err, time.Since(began))
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	return dynamoerr.Sleep(ctx, d)
}
