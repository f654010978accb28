package dynamo

import (
	"errors"
	"testing"

	"github.com/dynakafka/outbox"
)

// A nil option is refused by each constructor, before any I/O (the nil
// clients here are never called). (An option
// given to a constructor it does not serve does not compile: the root
// package's TestMisplacedOptionsDoNotCompile.)
func TestNilOptionRefused(t *testing.T) {
	tables := Tables{Messages: "never-m", Control: "never-c"}
	for name, open := range map[string]func() error{
		"CreateTables": func() error { return CreateTables(ctxT(t), nil, tables, nil) },
		"NewStore":     func() error { _, err := NewStore(ctxT(t), nil, tables, nil); return err },
		"NewWriter":    func() error { _, err := NewWriter(ctxT(t), nil, tables, FenceTTL(DefaultFenceTTL), nil); return err },
		"ChangeBucketCount": func() error {
			_, err := ChangeBucketCount(ctxT(t), nil, tables, 2, nil)
			return err
		},
	} {
		var oe *outbox.OptionError
		if err := open(); !errors.As(err, &oe) || oe.Option != "opts" {
			t.Errorf("%s with a nil option: %v, want an *OptionError for opts", name, err)
		}
	}
}
