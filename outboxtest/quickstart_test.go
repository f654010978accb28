package outboxtest_test

import (
	"context"
	"testing"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/outboxtest"
)

// The README's "5. Test it", word for word (TestReadmeQuickstartTest checks
// it).
func TestPlaceOrder(t *testing.T) {
	o := outboxtest.New(t, outboxtest.Memory(), outboxtest.Topics("order-events")) // without Memory(): DynamoDB Local
	m, err := outbox.JSON("order-events", "order-42", map[string]string{"type": "OrderPlaced"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Writer.Write(context.Background(), nil, m); err != nil { // your service, given o.Writer
		t.Fatal(err)
	}
	r := o.WaitForRecords(t, "order-events", 1)[0]
	if string(r.Key) != "order-42" || string(r.Value) != `{"type":"OrderPlaced"}` {
		t.Fatalf("published %s=%s", r.Key, r.Value)
	}
}
