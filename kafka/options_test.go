package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These need no broker: NewPublisher validates before any I/O, and builds its
// client without connecting.
var noBroker = []string{"127.0.0.1:1"}

func TestNewPublisherRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name   string
		seeds  []string
		opts   []Option
		option string
	}{
		{"no seeds", nil, nil, "seeds"},
		{"no compression codec", noBroker, []Option{Compression()}, "Compression"},
		{"lease too short", noBroker, []Option{LeaseDuration(500 * time.Millisecond)}, "LeaseDuration"},
		{"delivery timeout equals lease", noBroker, []Option{LeaseDuration(10 * time.Second), DeliveryTimeout(10 * time.Second)}, "DeliveryTimeout"},
		{"delivery timeout above default lease", noBroker, []Option{DeliveryTimeout(time.Minute)}, "DeliveryTimeout"},
		{"negative delivery timeout", noBroker, []Option{DeliveryTimeout(-time.Second)}, "DeliveryTimeout"},
		{"metadata min age leaves no room", noBroker, []Option{ClientOptions(kgo.MetadataMinAge(10 * time.Second))}, "DeliveryTimeout"},
		{"a lost topic's check leaves no room", noBroker, []Option{LeaseDuration(10 * time.Second), DeliveryTimeout(8700 * time.Millisecond)}, "DeliveryTimeout"},
		{"bad topic", noBroker, []Option{Topics("ok", "not ok")}, "Topics[1]"},
		{"nil SASL mechanism", noBroker, []Option{SASL(nil)}, "SASL[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPublisher(context.Background(), tt.seeds, tt.opts...)
			if err == nil {
				p.Close()
				t.Fatal("NewPublisher succeeded")
			}
			oe, ok := errors.AsType[*outbox.OptionError](err)
			if !ok || oe.Option != tt.option {
				t.Fatalf("error %v (%T): want an *outbox.OptionError for %s", err, err, tt.option)
			}
		})
	}
}

func TestNewPublisherDefaults(t *testing.T) {
	tests := []struct {
		name         string
		opts         []Option
		wantDelivery time.Duration
		wantBatch    int32
		wantMinAge   time.Duration
	}{
		{"defaults", nil, 20 * time.Second, outbox.DefaultMaxMessageBytes + 4, time.Second},
		{"lease sets delivery timeout", []Option{LeaseDuration(90 * time.Second)}, time.Minute, outbox.DefaultMaxMessageBytes + 4, time.Second},
		{"explicit delivery timeout", []Option{DeliveryTimeout(5 * time.Second)}, 5 * time.Second, outbox.DefaultMaxMessageBytes + 4, time.Second},
		// LeaseDuration*2/3 (2.67s) plus MetadataMinAge and twice
		// AbandonGrace would outlive a 4s lease: the default is lowered
		// to what fits, with one AbandonGrace to spare (the soak's lease).
		{"short lease lowers the default", []Option{LeaseDuration(4 * time.Second)}, 4*time.Second - time.Second - 3*AbandonGrace, outbox.DefaultMaxMessageBytes + 4, time.Second},
		{"the config item's MaxMessageBytes sets batch bytes", []Option{OutboxConfig(outbox.Config{MaxMessageBytes: 2048})}, 20 * time.Second, 2052, time.Second},
		{"ClientOptions may set MetadataMinAge", []Option{ClientOptions(kgo.MetadataMinAge(3 * time.Second))}, 20 * time.Second, outbox.DefaultMaxMessageBytes + 4, 3 * time.Second},
		{"ClientOptions cannot override enforced settings", []Option{ClientOptions(
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.ProducerBatchMaxBytes(16<<20),
			kgo.RecordDeliveryTimeout(time.Hour),
			kgo.ProducerBatchCompression(kgo.ZstdCompression()),
			kgo.ClientID("relay-test"),
		)}, 20 * time.Second, outbox.DefaultMaxMessageBytes + 4, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPublisher(context.Background(), noBroker, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.cfg.deliveryTimeout != tt.wantDelivery {
				t.Errorf("delivery timeout %v, want %v", p.cfg.deliveryTimeout, tt.wantDelivery)
			}
			checks := []struct {
				name string
				opt  any
				want any
			}{
				{"RequiredAcks", kgo.RequiredAcks, kgo.AllISRAcks()},
				{"DisableIdempotentWrite", kgo.DisableIdempotentWrite, false},
				{"ProducerBatchMaxBytes", kgo.ProducerBatchMaxBytes, tt.wantBatch},
				{"RecordDeliveryTimeout", kgo.RecordDeliveryTimeout, time.Duration(0)},
				{"MetadataMinAge", kgo.MetadataMinAge, tt.wantMinAge},
			}
			for _, c := range checks {
				if got := p.cl.OptValue(c.opt); got != c.want {
					t.Errorf("kgo.%s = %v, want %v", c.name, got, c.want)
				}
			}
			if _, ok := p.cl.OptValue(kgo.RecordPartitioner).(partitioner); !ok {
				t.Errorf("partitioner is %T, want the publisher's", p.cl.OptValue(kgo.RecordPartitioner))
			}
			codecs := p.cl.OptValue(kgo.ProducerBatchCompression).([]kgo.CompressionCodec)
			if want := DefaultCompression(); len(codecs) != len(want) || codecs[0] != want[0] {
				t.Errorf("compression %v, want %v", codecs, want)
			}
		})
	}
}

func TestNewPublisherRefusesDowngrades(t *testing.T) {
	tests := []struct {
		name   string
		opts   []kgo.Opt
		option string
	}{
		{"idempotence off", []kgo.Opt{kgo.DisableIdempotentWrite()}, "kgo.DisableIdempotentWrite"},
		{"idempotence off and acks=all", []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.AllISRAcks())}, "kgo.DisableIdempotentWrite"},
		{"leader ack", []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}, "kgo.RequiredAcks"},
		{"no ack with idempotence off", []kgo.Opt{kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite()}, "kgo.DisableIdempotentWrite"},
		{"no ack", []kgo.Opt{kgo.RequiredAcks(kgo.NoAck())}, "kgo.RequiredAcks"},
		{"in-flight cancellation", []kgo.Opt{kgo.AllowIdempotentProduceCancellation()}, "kgo.AllowIdempotentProduceCancellation"},
		{"transactional", []kgo.Opt{kgo.TransactionalID("relay")}, "kgo.TransactionalID"},
		{"manual flushing", []kgo.Opt{kgo.ManualFlushing()}, "kgo.ManualFlushing"},
		{"default topic always", []kgo.Opt{kgo.DefaultProduceTopicAlways(), kgo.DefaultProduceTopic("x")}, "kgo.DefaultProduceTopicAlways"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPublisher(context.Background(), noBroker, ClientOptions(tt.opts...))
			if err == nil {
				p.Close()
				t.Fatal("NewPublisher accepted the downgrade")
			}
			de, ok := errors.AsType[*DowngradeError](err)
			if !ok || de.Option != tt.option {
				t.Fatalf("error %v (%T): want a *DowngradeError for %s", err, err, tt.option)
			}
			if IsRetriable(err) {
				t.Errorf("IsRetriable(%v) = true", err)
			}
		})
	}

	t.Run("invalid kgo options are reported as such", func(t *testing.T) {
		_, err := NewPublisher(context.Background(), noBroker, ClientOptions(kgo.MaxProduceRequestsInflightPerBroker(3)))
		if err == nil || !strings.Contains(err.Error(), "ClientOptions") {
			t.Fatalf("error %v: want the kgo error, naming ClientOptions", err)
		}
		if _, ok := errors.AsType[*DowngradeError](err); ok {
			t.Fatalf("error %v is a *DowngradeError", err)
		}
	})
}
