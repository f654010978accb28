// Package orders is an example service built on the outbox, written from
// the README's quickstart and go doc ./outboxtest alone: placing an order
// writes the order and an OrderPlaced event in one transaction, paying it
// checks the version read and writes OrderPaid, and a consumer on the inbox
// keeps a read model of the orders. Its go test runs it all on outboxtest.
package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cloudevent"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// The events' CloudEvent types.
const (
	OrderPlaced = "com.example.order.placed"
	OrderPaid   = "com.example.order.paid"
)

// ErrChanged: the order is not at the version the caller read.
var ErrChanged = errors.New("orders: the order changed since it was read")

// Order is the data of both events.
type Order struct {
	ID          string `json:"id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// Service writes orders (table key "id") and their events (Topic).
type Service struct {
	w      dynamo.Enqueuer
	orders string
	topic  string
}

// NewService returns a Service writing into the orders table and topic.
func NewService(w dynamo.Enqueuer, orders, topic string) *Service {
	return &Service{w: w, orders: orders, topic: topic}
}

// Place creates the order at version 1, with its OrderPlaced event.
func (s *Service) Place(ctx context.Context, o Order) error {
	put, err := dynamo.Put(s.orders, map[string]any{"id": o.ID, "customer": o.Customer, "amount_cents": o.AmountCents, "status": "placed", "version": 1},
		expression.AttributeNotExists(expression.Name("id")))
	if err != nil {
		return err
	}
	return s.write(ctx, put, OrderPlaced, o)
}

// Pay marks the order paid if it is still at version (as read), with its
// OrderPaid event; ErrChanged if it is not.
func (s *Service) Pay(ctx context.Context, o Order, version int64) error {
	pay, err := dynamo.UpdateIfVersion(s.orders, map[string]any{"id": o.ID}, "version", version,
		expression.Set(expression.Name("status"), expression.Value("paid")))
	if err != nil {
		return err
	}
	return s.write(ctx, pay, OrderPaid, o)
}

func (s *Service) write(ctx context.Context, item types.TransactWriteItem, typ string, o Order) error {
	m, err := cloudevent.New(s.topic, o.ID, cloudevent.Event{Source: "/orders", Type: typ, Subject: o.ID, Data: o})
	if err != nil {
		return err
	}
	_, err = s.w.Write(ctx, []types.TransactWriteItem{item}, m)
	if errors.Is(err, outbox.ErrConditionFailed) {
		return fmt.Errorf("%w: %w", ErrChanged, err)
	}
	return err
}

// Project returns the consumer callback that keeps the read model in table
// view: one item per order (key "id") with its customer, amount and
// status. It is given to inbox.NewConsumer, which commits its update with
// the record's message id, once.
func Project(view string) func(tx *inbox.Tx) error {
	return func(tx *inbox.Tx) error {
		ev, err := tx.CloudEvent()
		if err != nil {
			return inbox.Permanent(err)
		}
		var o Order
		if err := ev.DecodeData(&o); err != nil {
			return inbox.Permanent(err)
		}
		var status string
		switch ev.Type {
		case OrderPlaced:
			status = "placed"
		case OrderPaid:
			status = "paid"
		default:
			return nil // not ours to project
		}
		up, err := dynamo.Update(view, map[string]any{"id": o.ID},
			expression.Set(expression.Name("customer"), expression.Value(o.Customer)).
				Set(expression.Name("amount_cents"), expression.Value(o.AmountCents)).
				Set(expression.Name("status"), expression.Value(status)))
		if err != nil {
			return err
		}
		tx.Add(up)
		return nil
	}
}
