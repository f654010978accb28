package deploy

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"sort"
	"testing"

	"github.com/dynakafka/outbox/lambda/emf"
	"github.com/dynakafka/outbox/lambda/handler"
)

// emfMetrics are the metrics the functions emit in CloudWatch Embedded
// Metric Format (the shared contract; lambda/handler's
// TestMetricSetsAreTheContract pins the names): namespace Outbox, one
// dimension Outbox = the messages table's name. Taken from the handlers, so
// an alarm or a widget on a metric nobody emits fails here.
var emfMetrics = func() map[string]bool {
	m := map[string]bool{}
	for _, set := range [][]emf.Metric{handler.RelayMetricSet, handler.SweeperMetricSet} {
		for _, x := range set {
			m[x.Name] = true
		}
	}
	return m
}()

const emfNamespace = handler.Namespace

// TestAlarms lists every alarm the template has and what it watches; an
// alarm added without a row here fails, so docs and tests follow.
func TestAlarms(t *testing.T) {
	tmpl := loadTemplate(t)
	type alarm struct {
		namespace, metric, dimension, value string // value as YAML
		statistic, comparison, threshold    string // threshold as YAML
	}
	want := map[string]alarm{
		"RelayErrorsAlarm":          {"AWS/Lambda", "Errors", "FunctionName", "!Ref RelayFunction", "Sum", "GreaterThanOrEqualToThreshold", "1"},
		"SweeperErrorsAlarm":        {"AWS/Lambda", "Errors", "FunctionName", "!Ref SweeperFunction", "Sum", "GreaterThanOrEqualToThreshold", "1"},
		"RelayIteratorAgeAlarm":     {"AWS/Lambda", "IteratorAge", "FunctionName", "!Ref RelayFunction", "Maximum", "GreaterThanThreshold", "!Ref IteratorAgeAlarmMilliseconds"},
		"RelayFailureQueueAlarm":    {"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "!GetAtt RelayFailureQueue.QueueName", "Maximum", "GreaterThanOrEqualToThreshold", "1"},
		"OldestPendingAgeAlarm":     {emfNamespace, "OldestPendingAge", "Outbox", "!If [AttachTables, !GetAtt OutboxConfig.MessagesTable, !If [GlobalTables, !Ref MessagesGlobalTable, !Ref MessagesTable]]", "Maximum", "GreaterThanThreshold", "!Ref OldestPendingAgeAlarmSeconds"},
		"StuckBucketsAlarm":         {emfNamespace, "StuckBuckets", "Outbox", "!If [AttachTables, !GetAtt OutboxConfig.MessagesTable, !If [GlobalTables, !Ref MessagesGlobalTable, !Ref MessagesTable]]", "Maximum", "GreaterThanOrEqualToThreshold", "1"},
		"ParkedMessagesAlarm":       {emfNamespace, "ParkedMessages", "Outbox", "!If [AttachTables, !GetAtt OutboxConfig.MessagesTable, !If [GlobalTables, !Ref MessagesGlobalTable, !Ref MessagesTable]]", "Maximum", "GreaterThanThreshold", "0"},
		"PublishFailuresFatalAlarm": {emfNamespace, "PublishFailuresFatal", "Outbox", "!If [AttachTables, !GetAtt OutboxConfig.MessagesTable, !If [GlobalTables, !Ref MessagesGlobalTable, !Ref MessagesTable]]", "Sum", "GreaterThanOrEqualToThreshold", "1"},
		// With EnableEnqueueFunction (Condition UseEnqueue).
		"EnqueueErrorsAlarm":       {"AWS/Lambda", "Errors", "FunctionName", "!Ref EnqueueFunction", "Sum", "GreaterThanOrEqualToThreshold", "1"},
		"EnqueueFailureQueueAlarm": {"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "!GetAtt EnqueueFailureQueue.QueueName", "Maximum", "GreaterThanOrEqualToThreshold", "1"},
		"RebucketOverdueAlarm":     {emfNamespace, "BucketCountChangeOverdue", "Outbox", "!If [AttachTables, !GetAtt OutboxConfig.MessagesTable, !If [GlobalTables, !Ref MessagesGlobalTable, !Ref MessagesTable]]", "Maximum", "GreaterThanThreshold", "0"},
	}
	missingData := map[string]string{}
	for name := range want {
		missingData[name] = "notBreaching"
	}
	missingData["OldestPendingAgeAlarm"] = "breaching"
	missingData["StuckBucketsAlarm"] = "breaching"
	alarms := resourcesOfType(tmpl, "AWS::CloudWatch::Alarm")
	if len(alarms) != len(want) {
		t.Errorf("alarms %v, want %d", alarms, len(want))
	}
	for _, name := range alarms {
		t.Run(name, func(t *testing.T) {
			w, ok := want[name]
			if !ok {
				t.Fatalf("alarm %s is not covered by this test", name)
			}
			p := at(tmpl, "Resources", name, "Properties")
			exact := map[string]any{
				"Namespace":          w.namespace,
				"MetricName":         w.metric,
				"Dimensions":         []any{map[string]any{"Name": w.dimension, "Value": cfn(t, w.value)}},
				"Statistic":          w.statistic,
				"ComparisonOperator": w.comparison,
				"Threshold":          cfn(t, w.threshold),
				// No data is not a failure (no invocations, or a value the
				// sweeper could not sample: then absent, never 0), except
				// for the backlog: the sweeper writes OldestPendingAge and
				// StuckBuckets on every invocation that sampled every
				// bucket, so their absence is a sweeper that failed its
				// init (Kafka unreachable), could not sample, or does not
				// run (lambda/wiring's
				// TestInitFailuresSurviveTheLogLevelFilter: no metric line).
				"TreatMissingData": missingData[name],
			}
			for k, v := range exact {
				if got := at(p, k); !reflect.DeepEqual(got, v) {
					t.Errorf("%s = %s, want %s", k, canon(got), canon(v))
				}
			}
			if w.namespace == emfNamespace && !emfMetrics[w.metric] {
				t.Errorf("metric %s is not one the functions emit", w.metric)
			}
			for _, k := range []string{"Period", "EvaluationPeriods", "AlarmDescription"} {
				if at(p, k) == nil {
					t.Errorf("no %s", k)
				}
			}
			if d, ok := at(p, "DatapointsToAlarm").(int); ok && d > at(p, "EvaluationPeriods").(int) {
				t.Errorf("DatapointsToAlarm %d > EvaluationPeriods", d)
			}
		})
	}
}

// metricRow is one metric of a dashboard widget, with the "." (same as the
// row above) and "..." (the row above, with its last values replaced)
// shorthands expanded.
type metricRow struct {
	namespace, name string
	dims            []string // name, value, name, value...
	opts            map[string]any
}

func expandRows(t *testing.T, rows []any) []metricRow {
	t.Helper()
	var out []metricRow
	var prev []string
	for _, r := range rows {
		list, _ := r.([]any)
		var fields []string
		opts := map[string]any{}
		for _, f := range list {
			switch v := f.(type) {
			case string:
				fields = append(fields, v)
			case map[string]any:
				opts = v
			default:
				t.Fatalf("metric row %s: element %s", canon(r), canon(f))
			}
		}
		if len(fields) > 0 && fields[0] == "..." {
			if prev == nil {
				t.Fatalf("metric row %s: ... without a row above", canon(r))
			}
			rest := fields[1:]
			fields = append(append([]string(nil), prev[:len(prev)-len(rest)]...), rest...)
		}
		for i, f := range fields {
			if f == "." {
				if i >= len(prev) {
					t.Fatalf("metric row %s: . at %d without a value above", canon(r), i)
				}
				fields[i] = prev[i]
			}
		}
		if len(fields) < 2 || len(fields)%2 != 0 {
			t.Fatalf("metric row %s: want namespace, name and dimension pairs, got %v", canon(r), fields)
		}
		out = append(out, metricRow{namespace: fields[0], name: fields[1], dims: fields[2:], opts: opts})
		prev = fields
	}
	return out
}

// TestDashboard evaluates the dashboard's body, checks it is JSON that
// CloudWatch reads (widgets with positions, metrics in the known
// namespaces), that it shows backlog, age, throughput, failures, durations
// and iterator age, and that every alarm is on it.
func TestDashboard(t *testing.T) {
	for _, enqueue := range []string{"false", "true"} {
		t.Run("EnableEnqueueFunction="+enqueue, func(t *testing.T) { checkDashboard(t, enqueue) })
	}
}

func checkDashboard(t *testing.T, enqueue string) {
	tmpl := loadTemplate(t)
	e, err := newEvaluator(tmpl, map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none", "EnableEnqueueFunction": enqueue})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Eval(at(tmpl, "Resources", "Dashboard", "Properties"))
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := at(p, "DashboardName").(string); name != "outbox-us-east-1-outbox" {
		t.Errorf("DashboardName %q", name)
	}
	var body struct {
		Widgets []struct {
			Type       string         `json:"type"`
			X          *int           `json:"x"`
			Y          *int           `json:"y"`
			Width      int            `json:"width"`
			Height     int            `json:"height"`
			Properties map[string]any `json:"properties"`
		} `json:"widgets"`
	}
	raw, _ := at(p, "DashboardBody").(string)
	if err := json.Unmarshal([]byte(raw), &body); err != nil {
		t.Fatalf("DashboardBody is not JSON: %v\n%s", err, raw)
	}
	shown := map[string]bool{}
	var alarms []string
	for i, w := range body.Widgets {
		if w.X == nil || w.Y == nil || *w.X+w.Width > 24 || w.Width < 1 || w.Width > 24 || w.Height < 1 {
			t.Errorf("widget %d: position/size %+v", i, w)
		}
		if _, ok := w.Properties["title"].(string); !ok {
			t.Errorf("widget %d has no title", i)
		}
		switch w.Type {
		case "alarm":
			for _, a := range w.Properties["alarms"].([]any) {
				alarms = append(alarms, a.(string))
			}
		case "metric":
			if w.Properties["region"] != "us-east-1" {
				t.Errorf("widget %d: region %v", i, w.Properties["region"])
			}
			rows, _ := w.Properties["metrics"].([]any)
			for _, m := range expandRows(t, rows) {
				shown[m.namespace+"/"+m.name] = true
				switch m.namespace {
				case emfNamespace:
					if !emfMetrics[m.name] {
						t.Errorf("widget %d shows %s, which the functions do not emit", i, m.name)
					}
					if !reflect.DeepEqual(m.dims, []string{"Outbox", "<MessagesTable>"}) {
						t.Errorf("widget %d: %s dimensions %v, want Outbox=<MessagesTable>", i, m.name, m.dims)
					}
				case "AWS/Lambda", "AWS/SQS":
				default:
					t.Errorf("widget %d: namespace %s", i, m.namespace)
				}
				if _, ok := m.opts["stat"]; !ok && w.Properties["stat"] == nil {
					t.Errorf("widget %d: %s has no statistic", i, m.name)
				}
			}
		default:
			t.Errorf("widget %d: type %s", i, w.Type)
		}
	}
	for _, want := range []string{
		"Outbox/PendingMessages", "Outbox/OldestPendingAge", // backlog, age
		"Outbox/MessagesPublished",                                                                       // throughput
		"Outbox/PublishFailuresFatal", "Outbox/PublishFailuresRetriable", "Outbox/PublishFailuresRecord", // failures
		"Outbox/PublishDuration", "Outbox/InvocationDuration", // durations
		"AWS/Lambda/IteratorAge", "Outbox/StuckBuckets", "Outbox/ParkedMessages",
	} {
		if !shown[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	if enqueue == "true" {
		for _, m := range []string{"AWS/Lambda/Invocations", "AWS/Lambda/Errors", "AWS/Lambda/Throttles", "AWS/Lambda/ConcurrentExecutions"} {
			if !shown[m] {
				t.Errorf("the dashboard does not show the enqueue function's %s", m)
			}
		}
	}
	var want []string
	for _, a := range resourcesOfType(tmpl, "AWS::CloudWatch::Alarm") {
		if ok, err := e.Included(a); err != nil || !ok {
			continue // not deployed with these parameters
		}
		want = append(want, "<"+a+".Arn>")
	}
	sort.Strings(alarms)
	if !reflect.DeepEqual(alarms, want) {
		t.Errorf("the alarm widget shows %v, want every alarm %v", alarms, want)
	}
}

// TestMetricsDocumented: docs/deploy.md's Metrics section has a row for
// every metric each function emits, with its unit, and no other.
func TestMetricsDocumented(t *testing.T) {
	src, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	start := regexp.MustCompile(`(?m)^## Metrics$`).FindStringIndex(doc)
	if start == nil {
		t.Fatal("docs/deploy.md has no Metrics section")
	}
	section := doc[start[1]:]
	if end := regexp.MustCompile(`(?m)^## `).FindStringIndex(section); end != nil {
		section = section[:end[0]]
	}
	rows := regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (\\w+) \\|").FindAllStringSubmatch(section, -1)
	documented := map[string]string{}
	for _, r := range rows {
		if _, dup := documented[r[1]]; dup && r[1] != handler.BucketsFailed.Name {
			t.Errorf("%s is documented twice", r[1])
		}
		documented[r[1]] = r[2]
	}
	for _, set := range [][]emf.Metric{handler.RelayMetricSet, handler.SweeperMetricSet} {
		for _, m := range set {
			if unit, ok := documented[m.Name]; !ok || unit != string(m.Unit) {
				t.Errorf("%s (%s) is documented as %q", m.Name, m.Unit, unit)
			}
		}
	}
	for name := range documented {
		if !emfMetrics[name] {
			t.Errorf("docs/deploy.md documents %s, which no function emits", name)
		}
	}
}
