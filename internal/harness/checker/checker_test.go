package checker

import "testing"

// The checker must catch each kind of broken promise: these are its
// self-tests with seeded faults.
func TestCheckerCatchesSeededFaults(t *testing.T) {
	clean := func() *Checker {
		c := New()
		c.Committed("a1", "a", 1)
		c.Committed("a2", "a", 2)
		c.Committed("b1", "b", 1)
		c.RolledBack("r1")
		return c
	}
	t.Run("clean run with a duplicate", func(t *testing.T) {
		c := clean()
		c.Delivered("a1", "a1", "a", 1)
		c.Delivered("b1", "b1", "b", 1)
		c.Delivered("a2", "a2", "a", 2)
		c.AtRisk("publish-error", "a1")
		c.AtRisk("takeover", "a1")      // the first cause stands
		c.Delivered("a1", "a1", "a", 1) // an older duplicate after a newer record: not a violation
		r := c.Result()
		if !r.OK() || r.Duplicates != 1 || r.DeliveredUnique != 3 || r.Lost != 0 || r.Causes() != "publish-error:1" {
			t.Fatalf("clean run judged %+v", r)
		}
	})
	t.Run("seeded loss", func(t *testing.T) {
		c := clean()
		c.Delivered("a1", "a1", "a", 1)
		c.Delivered("a2", "a2", "a", 2)
		r := c.Result()
		if r.OK() || r.Lost != 1 || r.LostIDs[0] != "b1" {
			t.Fatalf("loss not caught: %+v", r)
		}
		if c.Missing() != 1 {
			t.Fatalf("Missing = %d", c.Missing())
		}
	})
	t.Run("seeded phantom", func(t *testing.T) {
		c := clean()
		for _, id := range []string{"a1", "a2", "b1", "r1"} {
			c.Delivered(id, id, id[:1], 1)
		}
		r := c.Result()
		if r.OK() || r.Phantom != 1 || r.PhantomIDs[0] != "r1" {
			t.Fatalf("phantom not caught: %+v", r)
		}
	})
	t.Run("seeded reorder", func(t *testing.T) {
		c := clean()
		c.Delivered("a2", "a2", "a", 2)
		c.Delivered("a1", "a1", "a", 1)
		c.Delivered("b1", "b1", "b", 1)
		r := c.Result()
		if r.OK() || r.OrderViolations != 1 || r.Violations[0].ID != "a1" {
			t.Fatalf("reorder not caught: %+v", r)
		}
	})
	t.Run("seeded unexplained duplicate", func(t *testing.T) {
		c := clean()
		c.Delivered("a1", "a1", "a", 1)
		c.Delivered("a2", "a2", "a", 2)
		c.Delivered("b1", "b1", "b", 1)
		c.AtRisk("crash:after-produce", "a1")
		c.Delivered("a1", "a1", "a", 1) // explained: a crash put it at risk
		c.Delivered("b1", "b1", "b", 1) // unexplained
		r := c.Result()
		if r.OK() || r.Duplicates != 2 || r.Unexplained != 1 || r.UnexplainedIDs[0] != "b1" || r.Causes() != "crash:after-produce:1,unexplained:1" {
			t.Fatalf("unexplained duplicate not caught: %+v", r)
		}
	})
	t.Run("parked is accounted, not lost", func(t *testing.T) {
		c := clean()
		c.Delivered("a1", "a1", "a", 1)
		c.Delivered("a2", "a2", "a", 2)
		c.Parked("b1")
		r := c.Result()
		if !r.OK() || r.Parked != 1 || r.Lost != 0 || c.Missing() != 0 {
			t.Fatalf("parked message judged %+v", r)
		}
	})
	t.Run("seeded header mismatch", func(t *testing.T) {
		c := clean()
		c.Delivered("a1", "a2", "a", 1)
		if r := c.Result(); r.OK() || r.HeaderMismatch != 1 {
			t.Fatalf("mismatch not caught: %+v", r)
		}
	})
}

func TestExpected(t *testing.T) {
	c := New()
	c.Committed("a", "r1-x", 1001)
	c.Committed("b", "r1-x", 2001)
	c.Committed("p", "r1-x", 3001)
	c.Parked("p")
	c.Committed("c", "r1-y", 1001)
	c.Committed("q", "r1-y", 4001)
	c.Parked("q")
	c.Delivered("q", "q", "r1-y", 4001)
	c.Committed("d", "r2-x", 1001)
	c.RolledBack("e")
	got := c.Expected("r1-")
	want := map[string]Totals{"r1-x": {N: 2, Sum: 3002, Max: 2001}, "r1-y": {N: 2, Sum: 5002, Max: 4001}}
	if len(got) != len(want) || got["r1-x"] != want["r1-x"] || got["r1-y"] != want["r1-y"] {
		t.Fatalf("Expected = %+v, want %+v", got, want)
	}
}
