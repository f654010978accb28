package dynamo

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
)

// order is a business item as a service would declare it.
type order struct {
	ID      string `dynamodbav:"id"`
	Status  string `dynamodbav:"status"`
	Version int64  `dynamodbav:"ver,omitempty"`
}

// badValue cannot be marshalled.
type badValue struct{}

func (badValue) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	return nil, errors.New("badValue cannot be marshalled")
}

func orderKey(id string) map[string]any { return map[string]any{"id": id} }

func setStatus(s string) expression.UpdateBuilder {
	return expression.Set(expression.Name("status"), expression.Value(s))
}

// TestOperationsCommitAndFail runs each constructor's operation through
// Writer.Write against DynamoDB, once with its condition holding (item and
// message committed) and once failing (ErrConditionFailed, nothing written,
// the old item in the cancellation reason).
func TestOperationsCommitAndFail(t *testing.T) {
	w := newWriterEnv(t, 1)
	ctx := ctxT(t)
	seed := func(t *testing.T, o order) {
		t.Helper()
		put, err := Put(w.business, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.writer.Write(ctx, []types.TransactWriteItem{put}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(t *testing.T, id string) map[string]types.AttributeValue {
		t.Helper()
		return w.getItem(t, w.business, map[string]types.AttributeValue{"id": strAttr(id)})
	}
	type step struct {
		op      func(b string) (types.TransactWriteItem, error)
		want    map[string]string // attribute -> value after the step ("" = absent); nil: the item is gone
		wantOld string            // for a failing step: the status of the old item in the reason ("" = no old item)
	}
	for _, tc := range []struct {
		name          string
		seed          *order
		commit, fails step
	}{
		{
			name: "put if new",
			commit: step{op: func(b string) (types.TransactWriteItem, error) {
				return Put(b, order{ID: "put", Status: "placed", Version: 1}, expression.AttributeNotExists(expression.Name("id")))
			}, want: map[string]string{"status": "placed", "ver": "1"}},
			fails: step{op: func(b string) (types.TransactWriteItem, error) {
				return Put(b, map[string]any{"id": "put", "status": "again"}, expression.AttributeNotExists(expression.Name("id")))
			}, want: map[string]string{"status": "placed", "ver": "1"}, wantOld: "placed"},
		},
		{
			name: "update if version, new item",
			commit: step{op: func(b string) (types.TransactWriteItem, error) {
				return UpdateIfVersion(b, orderKey("new"), "ver", 0, setStatus("placed"))
			}, want: map[string]string{"status": "placed", "ver": "1"}},
			fails: step{op: func(b string) (types.TransactWriteItem, error) {
				return UpdateIfVersion(b, orderKey("new"), "ver", 0, setStatus("again"))
			}, want: map[string]string{"status": "placed", "ver": "1"}, wantOld: "placed"},
		},
		{
			name: "update if version",
			seed: &order{ID: "upd", Status: "placed", Version: 7},
			commit: step{op: func(b string) (types.TransactWriteItem, error) {
				return UpdateIfVersion(b, orderKey("upd"), "ver", 7, setStatus("paid").Remove(expression.Name("note")))
			}, want: map[string]string{"status": "paid", "ver": "8"}},
			fails: step{op: func(b string) (types.TransactWriteItem, error) {
				return UpdateIfVersion(b, orderKey("upd"), "ver", 7, setStatus("shipped")) // a stale read
			}, want: map[string]string{"status": "paid", "ver": "8"}, wantOld: "paid"},
		},
		{
			name: "update if version, bump only, extra condition",
			seed: &order{ID: "bump", Status: "paid", Version: 1},
			commit: step{op: func(b string) (types.TransactWriteItem, error) {
				return UpdateIfVersion(b, orderKey("bump"), "ver", 1, expression.UpdateBuilder{}, expression.Name("status").Equal(expression.Value("paid")))
			}, want: map[string]string{"status": "paid", "ver": "2"}},
			fails: step{op: func(b string) (types.TransactWriteItem, error) {
				return UpdateIfVersion(b, orderKey("bump"), "ver", 2, expression.UpdateBuilder{}, expression.Name("status").Equal(expression.Value("cancelled")))
			}, want: map[string]string{"status": "paid", "ver": "2"}, wantOld: "paid"},
		},
		{
			name: "update with a condition",
			seed: &order{ID: "cond", Status: "placed"},
			commit: step{op: func(b string) (types.TransactWriteItem, error) {
				return Update(b, orderKey("cond"), setStatus("paid"), expression.Name("status").Equal(expression.Value("placed")))
			}, want: map[string]string{"status": "paid", "ver": ""}},
			fails: step{op: func(b string) (types.TransactWriteItem, error) {
				return Update(b, orderKey("cond"), setStatus("paid"), expression.Name("status").Equal(expression.Value("placed")))
			}, want: map[string]string{"status": "paid", "ver": ""}, wantOld: "paid"},
		},
		{
			name: "condition check",
			seed: &order{ID: "check", Status: "active"},
			commit: step{op: func(b string) (types.TransactWriteItem, error) {
				return Check(b, orderKey("check"), expression.Name("status").Equal(expression.Value("active")), expression.AttributeExists(expression.Name("id")))
			}, want: map[string]string{"status": "active"}},
			fails: step{op: func(b string) (types.TransactWriteItem, error) {
				return Check(b, orderKey("check"), expression.Name("status").Equal(expression.Value("closed")))
			}, want: map[string]string{"status": "active"}, wantOld: "active"},
		},
		{
			name: "condition check of a missing item",
			commit: step{op: func(b string) (types.TransactWriteItem, error) {
				return Check(b, orderKey("absent"), expression.AttributeNotExists(expression.Name("id")))
			}},
			fails: step{op: func(b string) (types.TransactWriteItem, error) {
				return Check(b, orderKey("absent"), expression.AttributeExists(expression.Name("id")))
			}},
		},
		{
			name: "delete with a condition",
			seed: &order{ID: "del", Status: "cancelled"},
			commit: step{op: func(b string) (types.TransactWriteItem, error) {
				return Delete(b, orderKey("del"), expression.Name("status").Equal(expression.Value("cancelled")))
			}},
			fails: step{op: func(b string) (types.TransactWriteItem, error) {
				return Delete(b, orderKey("del"), expression.AttributeExists(expression.Name("id")))
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.seed != nil {
				seed(t, *tc.seed)
			}
			id := ""
			before := len(w.entries(t, 0))
			for i, s := range []step{tc.commit, tc.fails} {
				it, err := s.op(w.business)
				if err != nil {
					t.Fatalf("step %d: build: %v", i, err)
				}
				id = keyID(t, it)
				_, err = w.writer.Write(ctx, []types.TransactWriteItem{it}, keyed("k"))
				if i == 0 && err != nil {
					t.Fatalf("commit: %v", err)
				}
				if i == 1 {
					var te *TransactionError
					if !errors.Is(err, outbox.ErrConditionFailed) || !errors.As(err, &te) {
						t.Fatalf("failing condition: %v, want a *TransactionError matching ErrConditionFailed", err)
					}
					reasons := te.CallerReasons()
					if len(reasons) != 1 || aws.ToString(reasons[0].Code) != dynamoerr.CodeCondition {
						t.Fatalf("caller reasons %+v, want one ConditionalCheckFailed", reasons)
					}
					if got := stringOf(reasons[0].Item["status"]); got != s.wantOld {
						t.Errorf("old item's status in the reason = %q, want %q", got, s.wantOld)
					}
				}
				got := read(t, id)
				if s.want == nil && got != nil {
					t.Errorf("step %d: item %v, want none", i, got)
				}
				for attr, want := range s.want {
					v := ""
					switch av := got[attr].(type) {
					case *types.AttributeValueMemberS:
						v = av.Value
					case *types.AttributeValueMemberN:
						v = av.Value
					}
					if v != want {
						t.Errorf("step %d: %s = %q, want %q (item %v)", i, attr, v, want, got)
					}
				}
			}
			// One message from the commit, none from the failure.
			if n := len(w.entries(t, 0)); n != before+2 {
				// The failed write's reserved number is fenced: +1 message, +1 fence.
				t.Errorf("bucket holds %d entries, want %d (a message and a fence)", n, before+2)
			}
			var msgs int
			for _, e := range w.entries(t, 0)[before:] {
				if !e.Fence {
					msgs++
				}
			}
			if msgs != 1 {
				t.Errorf("%d messages written, want 1 (the committed step's)", msgs)
			}
		})
	}
}

// keyID is the id attribute of an operation's key or item.
func keyID(t *testing.T, it types.TransactWriteItem) string {
	t.Helper()
	var k map[string]types.AttributeValue
	switch {
	case it.Put != nil:
		k = it.Put.Item
	case it.Update != nil:
		k = it.Update.Key
	case it.Delete != nil:
		k = it.Delete.Key
	case it.ConditionCheck != nil:
		k = it.ConditionCheck.Key
	}
	id := stringOf(k["id"])
	if id == "" {
		t.Fatalf("no id in %+v", it)
	}
	return id
}

func TestOperationErrors(t *testing.T) {
	good := expression.Name("id").AttributeExists()
	for _, tc := range []struct {
		name  string
		build func() (types.TransactWriteItem, error)
		field string
		cause any // a pointer to the error type Err must match; nil: none
	}{
		{"put: no table", func() (types.TransactWriteItem, error) { return Put("", order{ID: "a"}) }, "table", nil},
		{"put: nil item", func() (types.TransactWriteItem, error) { return Put("t", nil) }, "item", nil},
		{"put: not a map", func() (types.TransactWriteItem, error) { return Put("t", "id-1") }, "item", nil},
		{"put: unmarshallable item", func() (types.TransactWriteItem, error) {
			return Put("t", map[string]any{"id": "a", "c": badValue{}})
		}, "item", new(error)},
		{"put: unmarshallable condition value", func() (types.TransactWriteItem, error) {
			return Put("t", order{ID: "a"}, expression.Name("x").Equal(expression.Value(badValue{})))
		}, "condition", new(error)},
		{"put: zero condition", func() (types.TransactWriteItem, error) {
			return Put("t", order{ID: "a"}, good, expression.ConditionBuilder{})
		}, "condition", new(expression.UnsetParameterError)},
		{"update: zero update", func() (types.TransactWriteItem, error) {
			return Update("t", orderKey("a"), expression.UpdateBuilder{}, good)
		}, "update", new(expression.UnsetParameterError)},
		{"update: unmarshallable update value", func() (types.TransactWriteItem, error) {
			return Update("t", orderKey("a"), expression.Set(expression.Name("x"), expression.Value(badValue{})), good)
		}, "update", new(error)},
		{"update: empty key", func() (types.TransactWriteItem, error) {
			return Update("t", map[string]any{}, setStatus("x"))
		}, "key", nil},
		{"update if version: no attribute", func() (types.TransactWriteItem, error) {
			return UpdateIfVersion("t", orderKey("a"), "", 1, setStatus("x"))
		}, "version attribute", nil},
		{"update if version: nested attribute", func() (types.TransactWriteItem, error) {
			return UpdateIfVersion("t", orderKey("a"), "meta.ver", 1, setStatus("x"))
		}, "version attribute", nil},
		{"update if version: negative", func() (types.TransactWriteItem, error) {
			return UpdateIfVersion("t", orderKey("a"), "ver", -1, setStatus("x"))
		}, "version", nil},
		{"update if version: update sets the version", func() (types.TransactWriteItem, error) {
			return UpdateIfVersion("t", orderKey("a"), "ver", 3, setStatus("x").Set(expression.Name("ver"), expression.Value(4)))
		}, "update", nil},
		{"update if version: unmarshallable update", func() (types.TransactWriteItem, error) {
			return UpdateIfVersion("t", orderKey("a"), "ver", 3, expression.Set(expression.Name("x"), expression.Value(badValue{})))
		}, "update", new(error)},
		{"check: no condition", func() (types.TransactWriteItem, error) {
			return Check("t", orderKey("a"), expression.ConditionBuilder{})
		}, "condition", nil},
		{"check: no key", func() (types.TransactWriteItem, error) { return Check("t", nil, good) }, "key", nil},
		{"delete: no table", func() (types.TransactWriteItem, error) { return Delete("", orderKey("a")) }, "table", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it, err := tc.build()
			var oe *OperationError
			if !errors.As(err, &oe) {
				t.Fatalf("got %+v, %v; want an *OperationError", it, err)
			}
			if oe.Field != tc.field || oe.Reason == "" || oe.Op == "" {
				t.Errorf("%#v: want Field %q, an Op and a Reason", oe, tc.field)
			}
			if !strings.Contains(err.Error(), oe.Reason) {
				t.Errorf("message %q lacks the reason", err)
			}
			switch c := tc.cause.(type) {
			case nil:
			case *error:
				if oe.Err == nil {
					t.Errorf("Err is nil, want the builder's or marshaller's error")
				}
			default:
				if !errors.As(err, c) {
					t.Errorf("Err = %v (%T), want %T", oe.Err, oe.Err, c)
				}
			}
			if !reflect.ValueOf(it).IsZero() {
				t.Errorf("an item came with the error: %+v", it)
			}
		})
	}
}

// The version bump is added to the built expression, not to the caller's
// builder (whose maps every copy shares), so one builder serves many calls.
func TestUpdateIfVersionLeavesTheUpdateAlone(t *testing.T) {
	update := setStatus("paid").Remove(expression.Name("note")).Add(expression.Name("n"), expression.Value(1))
	before, err := expression.NewBuilder().WithUpdate(update).Build()
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for v := int64(1); v <= 3; v++ {
		it, err := UpdateIfVersion("orders", orderKey("a"), "ver", v, update)
		if err != nil {
			t.Fatal(err)
		}
		u := it.Update
		got := aws.ToString(u.UpdateExpression)
		if strings.Count(got, "#v = :v") != 1 || !strings.Contains(got, "\nSET #v = :v, ") {
			t.Errorf("version %d: update %q, want one bump in the SET clause", v, got)
		}
		if first == "" {
			first = got
		} else if got != first {
			t.Errorf("version %d: update %q, the first call's was %q", v, got, first)
		}
		if u.ExpressionAttributeNames["#v"] != "ver" || !reflect.DeepEqual(u.ExpressionAttributeValues[":v"], numAttr(v+1)) {
			t.Errorf("version %d: bump placeholders %v %v", v, u.ExpressionAttributeNames, u.ExpressionAttributeValues)
		}
	}
	after, err := expression.NewBuilder().WithUpdate(update).Build()
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(after.Update()) != aws.ToString(before.Update()) {
		t.Errorf("the caller's update changed: %q, was %q", aws.ToString(after.Update()), aws.ToString(before.Update()))
	}
}

// withSet relies on the builder writing one clause per line, each starting
// with its keyword; this pins that format.
func TestWithSetOnBuilderOutput(t *testing.T) {
	for _, tc := range []struct {
		update expression.UpdateBuilder
		want   string
	}{
		{setStatus("x"), "SET #v = :v, #0 = :0\n"},
		{expression.Remove(expression.Name("a")), "SET #v = :v\nREMOVE #0\n"},
		{expression.Add(expression.Name("a"), expression.Value(1)).Set(expression.Name("b"), expression.Value(2)).Remove(expression.Name("c")),
			"ADD #0 :0\nREMOVE #1\nSET #v = :v, #2 = :1\n"},
	} {
		e, err := expression.NewBuilder().WithUpdate(tc.update).Build()
		if err != nil {
			t.Fatal(err)
		}
		if got := withSet(aws.ToString(e.Update()), "#v = :v"); got != tc.want {
			t.Errorf("withSet(%q) = %q, want %q", aws.ToString(e.Update()), got, tc.want)
		}
	}
}
