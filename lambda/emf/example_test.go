package emf_test

import (
	"log"
	"os"
	"time"

	"github.com/dynakafka/outbox/lambda/emf"
)

func ExampleEmitter() {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e, err := emf.New(os.Stdout, "Outbox", []emf.Dimension{{Name: "Outbox", Value: "orders-outbox"}},
		emf.WithClock(func() time.Time { return at }))
	if err != nil {
		log.Fatal(err)
	}
	var l emf.Line
	l.Value(emf.Metric{Name: "MessagesPublished", Unit: emf.Count}, 12)
	l.Values(emf.Metric{Name: "PublishDuration", Unit: emf.Milliseconds}, 4.5, 3)
	// Not sampled this time: absent from the line, not 0.
	l.Values(emf.Metric{Name: "BatchSize", Unit: emf.Count})
	if err := e.Emit(&l); err != nil {
		log.Fatal(err)
	}
	// Output:
	// {"_aws":{"Timestamp":1772366400000,"CloudWatchMetrics":[{"Namespace":"Outbox","Dimensions":[["Outbox"]],"Metrics":[{"Name":"MessagesPublished","Unit":"Count"},{"Name":"PublishDuration","Unit":"Milliseconds"}]}]},"Outbox":"orders-outbox","MessagesPublished":12,"PublishDuration":[4.5,3]}
}
