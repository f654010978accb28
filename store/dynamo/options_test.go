package dynamo

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
)

// One option type serves CreateTables, NewStore and NewWriter: an option
// given to a constructor it does not apply to is refused, naming it and
// where it belongs, before any I/O (neverClient fails every call; the
// options are checked before the nil client is).
func TestOptionRefusedWhereItDoesNotApply(t *testing.T) {
	var d neverClient
	tables := Tables{Messages: "never-m", Control: "never-c"}
	cases := []struct {
		name   string
		open   func(opts ...Option) error
		opts   []Option
		option string
		where  string
	}{
		{"retention to a writer", func(o ...Option) error { _, err := NewWriter(ctxT(t), nil, tables, o...); return err },
			[]Option{WithMode(outbox.WatermarkMode), Retention(48 * time.Hour)}, "Retention", "CreateTables"},
		{"topics to a store", func(o ...Option) error { _, err := NewStore(ctxT(t), nil, tables, o...); return err },
			[]Option{Topics("orders")}, "Topics", "CreateTables"},
		{"tombstone TTL to CreateTables", func(o ...Option) error { return CreateTables(ctxT(t), d, tables, o...) },
			[]Option{TombstoneTTL(2 * time.Hour)}, "TombstoneTTL", "NewStore"},
		{"max attempts to a store", func(o ...Option) error { _, err := NewStore(ctxT(t), nil, tables, o...); return err },
			[]Option{MaxAttempts(3)}, "MaxAttempts", "NewWriter"},
		{"a nil option", func(o ...Option) error { _, err := NewWriter(ctxT(t), nil, tables, o...); return err },
			[]Option{nil}, "opts", "nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var oe *outbox.OptionError
			err := c.open(c.opts...)
			if !errors.As(err, &oe) || oe.Option != c.option || !strings.Contains(err.Error(), c.where) {
				t.Fatalf("got %v, want an *OptionError for %s naming %s", err, c.option, c.where)
			}
		})
	}
}
