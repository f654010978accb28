package lambdalog

import "testing"

// TestTheDocumentedRule: the model follows the guide's sentences, each
// checked on a line.
func TestTheDocumentedRule(t *testing.T) {
	cases := []struct {
		line, assigned string
	}{
		{`{"level":"debug","msg":"my debug log","timestamp":"2024-11-02T16:51:31.587199Z"}`, "DEBUG"}, // the guide's example
		{`{"level":"ERROR","msg":"x","timestamp":"2024-11-02T16:51:31+02:00"}`, "ERROR"},
		{`{"level":"ERROR","msg":"x","time":"2024-11-02T16:51:31Z"}`, "INFO"},     // no timestamp member
		{`{"level":"ERROR","msg":"x","timestamp":"2024-11-02 16:51:31"}`, "INFO"}, // not RFC 3339
		{`{"level":"ERROR","msg":"x","timestamp":1730566291}`, "INFO"},            // a number
		{`{"level":"SEVERE","msg":"x","timestamp":"2024-11-02T16:51:31Z"}`, "INFO"},
		{`{"msg":"x","timestamp":"2024-11-02T16:51:31Z"}`, "INFO"},
		{`ERROR plain text`, "INFO"},
	}
	for _, c := range cases {
		if got := Assigned([]byte(c.line)); got != c.assigned {
			t.Errorf("Assigned(%s) = %s, want %s", c.line, got, c.assigned)
		}
	}
	if !Kept("ERROR", []byte(cases[1].line)) || Kept("WARN", []byte(cases[2].line)) || !Kept("", []byte(cases[2].line)) || Kept("INFO", []byte(cases[0].line)) {
		t.Fatal("Kept does not compare the assigned level with the function's")
	}
}
