package handler

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
)

// The oracle below reads stream keys without strconv, so that the fuzz
// targets check decodeHint against an independent reading of what a hint is:
// b and s are DynamoDB numbers written as decimal integers (an optional sign,
// digits), s in 0..MaxInt64 and b a possible bucket, 0..MaxBucketCount-1.

var decimalInteger = regexp.MustCompile(`^[+-]?[0-9]+$`)

// oracleNumber is the value of key name if it is a decimal integer number in
// 0..max.
func oracleNumber(keys map[string]events.DynamoDBAttributeValue, name string, max int64) (int64, bool) {
	av, ok := keys[name]
	if !ok || av.DataType() != events.DataTypeNumber || !decimalInteger.MatchString(av.Number()) {
		return 0, false
	}
	n, ok := new(big.Int).SetString(av.Number(), 10)
	if !ok || n.Sign() < 0 || n.Cmp(big.NewInt(max)) > 0 {
		return 0, false
	}
	return n.Int64(), true
}

// oracleHint is what a correct decodeHint returns for keys.
func oracleHint(keys map[string]events.DynamoDBAttributeValue) (bucket int, seq int64, ok bool) {
	b, okB := oracleNumber(keys, "b", outbox.MaxBucketCount-1)
	s, okS := oracleNumber(keys, "s", math.MaxInt64)
	return int(b), s, okB && okS
}

// isCanonical says whether a decimal integer is written the way DynamoDB
// writes numbers: no sign for non-negative values, no leading zeros.
func isCanonical(n string) bool {
	return n == "0" || (len(n) > 0 && n[0] >= '1' && n[0] <= '9' && decimalInteger.MatchString(n))
}

func hintKeys(b int, s int64) map[string]events.DynamoDBAttributeValue {
	return map[string]events.DynamoDBAttributeValue{
		"b": events.NewNumberAttribute(strconv.Itoa(b)),
		"s": events.NewNumberAttribute(strconv.FormatInt(s, 10)),
	}
}

// FuzzDecodeHint decodes the Keys of a stream record as Lambda delivers them
// (JSON). decodeHint must agree with the oracle: either a *HintError naming
// the record, or a bucket and sequence number equal to the keys' values that
// re-encode to keys decoding to the same result (and to the same strings when
// the input was canonical).
func FuzzDecodeHint(f *testing.F) {
	for _, seed := range []string{
		`{"b":{"N":"3"},"s":{"N":"17"}}`,
		`{"b":{"N":"0"},"s":{"N":"0"}}`,
		`{"b":{"N":"4095"},"s":{"N":"9223372036854775807"}}`,
		`{"b":{"N":"4096"},"s":{"N":"1"}}`, // one above the largest bucket
		`{"b":{"N":"1"},"s":{"N":"9223372036854775808"}}`,
		`{"b":{"N":"-1"},"s":{"N":"1"}}`,
		`{"b":{"N":"-0"},"s":{"N":"+7"}}`,
		`{"b":{"N":"007"},"s":{"N":"1"}}`,
		`{"b":{"N":"1.5"},"s":{"N":"1"}}`,
		`{"b":{"N":"1E1"},"s":{"N":"1"}}`,
		`{"b":{"S":"3"},"s":{"N":"1"}}`,
		`{"b":{"N":"3"}}`,
		`{"s":{"N":"3"}}`,
		`{"b":{"NULL":true},"s":{"N":"1"}}`,
		`{"b":{"M":{"N":{"N":"1"}}},"s":{"N":"1"}}`,
		`{"b":{"N":"2"},"s":{"N":"5"},"x":{"B":"AAE="}}`,
	} {
		f.Add([]byte(seed), "evt-1")
	}
	f.Fuzz(func(t *testing.T, keysJSON []byte, eventID string) {
		var keys map[string]events.DynamoDBAttributeValue
		if err := json.Unmarshal(keysJSON, &keys); err != nil {
			return // the Lambda runtime rejects such a batch before the handler runs
		}
		rec := events.DynamoDBEventRecord{EventID: eventID, EventName: "INSERT",
			Change: events.DynamoDBStreamRecord{Keys: keys, SequenceNumber: "1"}}
		b, s, err := decodeHint(rec)
		wantB, wantS, valid := oracleHint(keys)
		if err != nil {
			var he *HintError
			if !errors.As(err, &he) || he.EventID != eventID {
				t.Fatalf("decodeHint(%s) = %v (%T); want a *HintError naming event %q", keysJSON, err, err, eventID)
			}
			if b != 0 || s != 0 {
				t.Errorf("decodeHint(%s) returned %d, %d with its error", keysJSON, b, s)
			}
			if valid {
				t.Fatalf("decodeHint(%s) refused a valid hint (bucket %d, seq %d): %v", keysJSON, wantB, wantS, err)
			}
			return
		}
		if !valid {
			t.Fatalf("decodeHint(%s) = %d, %d; want a *HintError (not a bucket 0..%d and a sequence number 0..MaxInt64)",
				keysJSON, b, s, outbox.MaxBucketCount-1)
		}
		if b != wantB || s != wantS {
			t.Fatalf("decodeHint(%s) = %d, %d; the keys say %d, %d", keysJSON, b, s, wantB, wantS)
		}
		// Round trip: the keys a writer stores for (b, s) decode to (b, s).
		again := hintKeys(b, s)
		rec.Change.Keys = again
		if b2, s2, err := decodeHint(rec); err != nil || b2 != b || s2 != s {
			t.Fatalf("re-encoded keys %v decode to %d, %d, %v; want %d, %d", again, b2, s2, err, b, s)
		}
		for _, name := range []string{"b", "s"} {
			in, out := keys[name].Number(), again[name].Number()
			if isCanonical(in) && in != out {
				t.Errorf("key %s: canonical %q re-encodes as %q", name, in, out)
			}
		}
	})
}

// FuzzRelayHandle runs the relay handler on arbitrary event JSON with a fake
// drainer whose buckets fail, are held or drain according to failSeed. The
// handler must never panic or return a function error, must drain exactly
// the in-range buckets named by valid INSERT hints (each once), must count
// every record in exactly one class, and must report as the only batch item
// failure the lowest sequence number among the failed buckets' records.
func FuzzRelayHandle(f *testing.F) {
	fixtures, _ := filepath.Glob("testdata/*.json")
	for _, name := range fixtures {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint16(7), uint8(0))
		f.Add(b, uint16(7), uint8(5))
	}
	f.Add([]byte(`{"Records":[{"eventID":"a","eventName":"INSERT","dynamodb":{"Keys":{"b":{"N":"4096"},"s":{"N":"1"}},"SequenceNumber":"9"}}]}`), uint16(4095), uint8(1))
	f.Fuzz(func(t *testing.T, eventJSON []byte, count uint16, failSeed uint8) {
		var ev events.DynamoDBEvent
		if err := json.Unmarshal(eventJSON, &ev); err != nil {
			return // the Lambda runtime rejects such a batch before the handler runs
		}
		bucketCount := 1 + int(count)%outbox.MaxBucketCount
		errBroker := errors.New("broker down")
		outcome := func(b int) error { // decided by failSeed, the same for every call
			switch (b + int(failSeed)) % 4 {
			case 1:
				return errBroker
			case 2:
				return outbox.ErrLeaseHeld
			}
			return nil
		}

		// What the handler must do, from the oracle.
		lowest := map[int]string{}
		var ignored, malformed, outOfRange int64
		for _, rec := range ev.Records {
			if rec.EventName != "INSERT" {
				ignored++
				continue
			}
			b, _, ok := oracleHint(rec.Change.Keys)
			switch {
			case !ok:
				malformed++
			case b >= bucketCount:
				outOfRange++
			default:
				if cur, seen := lowest[b]; !seen || seqLess(rec.Change.SequenceNumber, cur) {
					lowest[b] = rec.Change.SequenceNumber
				}
			}
		}
		var wantFailure string
		failed := false
		for b, sn := range lowest {
			if outcome(b) == errBroker && (!failed || seqLess(sn, wantFailure)) {
				wantFailure, failed = sn, true
			}
		}

		d := &fakeDrainer{count: bucketCount, errs: map[int]error{}}
		for b := range lowest {
			if err := outcome(b); err != nil {
				d.errs[b] = err
			}
		}
		h := newHandler(d)
		resp, err := h.Handle(context.Background(), ev)
		if err != nil {
			t.Fatalf("Handle returned a function error (Lambda would retry the whole batch): %v", err)
		}
		drained := d.buckets()
		if len(drained) != len(lowest) {
			t.Fatalf("drained buckets %v, want each of the %d hinted in-range buckets once", drained, len(lowest))
		}
		for i, b := range drained {
			if _, ok := lowest[b]; !ok || (i > 0 && drained[i-1] == b) {
				t.Fatalf("drained buckets %v; bucket %d is not a valid in-range hint or was drained twice", drained, b)
			}
		}
		c := h.Counters()
		if c.Records.Load() != int64(len(ev.Records)) || c.Ignored.Load() != ignored ||
			c.Malformed.Load() != malformed || c.OutOfRange.Load() != outOfRange {
			t.Fatalf("counters records=%d ignored=%d malformed=%d out_of_range=%d; want %d %d %d %d",
				c.Records.Load(), c.Ignored.Load(), c.Malformed.Load(), c.OutOfRange.Load(),
				len(ev.Records), ignored, malformed, outOfRange)
		}
		switch {
		case !failed && len(resp.BatchItemFailures) != 0:
			t.Fatalf("batch item failures %v, but no bucket failed", resp.BatchItemFailures)
		case failed && (len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != wantFailure):
			t.Fatalf("batch item failures %v; want exactly [%q], the lowest record of a failed bucket", resp.BatchItemFailures, wantFailure)
		}
	})
}
