package main

import (
	"context"
	"errors"
)

// watermarkCost is what the bench learns from a watermark-mode outbox
// before its drains: the writer's message item (with its TTL attribute,
// the template of the watermark backlogs) and the writer's capacity per
// message at one message per transaction.
type watermarkCost struct {
	tmpl   *template
	writer writerRow
}

// watermarkCapacity writes with a dynamo.Writer to a fresh watermark-mode
// outbox: one message for the template, then the capacity stage's
// one-message transactions, metered.
func watermarkCapacity(ctx context.Context, e *env, g *gen, o options) (*watermarkCost, error) {
	wc := &watermarkCost{}
	err := withStage(ctx, e, "capacity-watermark", 8, func(st *stage) (err error) {
		if wc.tmpl, err = newTemplate(ctx, st, g); err != nil {
			return err
		}
		if _, ok := wc.tmpl.base["x"]; !ok {
			return errNoTTL
		}
		rows, err := writerCapacity(ctx, st, g, itemBytes(wc.tmpl.item(g.message(st.topic, 0))), map[int]int{1: o.txns[1]})
		if err != nil {
			return err
		}
		wc.writer = rows[0]
		return nil
	}, modeWatermark.Tables...)
	return wc, err
}

// result compares the median watermark drain with the median delete-mode
// drain of the same rounds; delWriter is the delete-mode writer's WCU per
// message at one message per transaction.
func (wc *watermarkCost) result(wm, del drainResult, delWriter float64) *watermark {
	if wm.Messages == 0 {
		return nil
	}
	size := itemBytes(wc.tmpl.base)
	w := &watermark{
		RelayMsgsPerS: wm.MsgsPerS, DeleteModeMsgsPerS: del.MsgsPerS,
		WriterWCUPerMsg: wc.writer.AWSRuleWCU, Relay: relayCapacityOf(wm, size), MessageItemBytes: size, Retained: wm.Remaining,
	}
	w.WCUPerMsg = w.WriterWCUPerMsg + w.Relay.AWSRuleWCU
	// The default mode's, for comparison: its writer at one message per
	// transaction plus its relay, from the same rounds.
	w.DeleteModeWCUPerMsg = delWriter + relayCapacityOf(del, size).AWSRuleWCU
	return w
}

// errNoTTL: the writer of a watermark outbox stored a message without its
// TTL attribute.
var errNoTTL = errors.New("the watermark writer's item has no TTL attribute x: the watermark measurements would be of the wrong items")
