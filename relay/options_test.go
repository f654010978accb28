package relay

import (
	"errors"
	"testing"

	"github.com/dynakafka/outbox"
)

// The Region option is checked as a region id (outbox.ValidateRegionID).
func TestRegionOptionRefusesABadID(t *testing.T) {
	c := defaultConfig()
	Region("Bad Region")(&c)
	var oe *outbox.OptionError
	if err := c.validate(); !errors.As(err, &oe) || oe.Option != "Region" {
		t.Errorf("the Region option with an invalid id: validate = %v, want an *OptionError for Region", err)
	}
}
