// Package emf writes CloudWatch Embedded Metric Format documents: one JSON
// object per line, which CloudWatch Logs turns into metrics when it ingests
// the line. In Lambda that means writing to stdout; no agent, no
// PutMetricData call, no extra permission.
//
// An Emitter fixes the namespace and the dimensions; a Line carries one
// document's values. A metric that could not be sampled is simply not set,
// so it is absent from the document rather than 0.
//
//	e, err := emf.New(os.Stdout, "Outbox", []emf.Dimension{{Name: "Outbox", Value: table}})
//	var l emf.Line
//	l.Value(emf.Metric{Name: "MessagesPublished", Unit: emf.Count}, 12)
//	l.Values(emf.Metric{Name: "PublishDuration", Unit: emf.Milliseconds}, 4.2, 3.9)
//	err = e.Emit(&l)
//
// The specification: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
package emf
