package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

func TestManualClockDrivesTheSchedule(t *testing.T) {
	start := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	clk := NewManualClock(start)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan events.CloudWatchEvent, 10)
	var errs []error
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Clock: clk, Region: "eu-west-1", Account: "123456789012", Rule: "r"},
			func(ctx context.Context, ev events.CloudWatchEvent) error {
				got <- ev
				if len(got) == 2 {
					return errors.New("second run fails")
				}
				return nil
			}, func(err error) { errs = append(errs, err) })
	}()
	for i := 0; i < 3; i++ {
		if err := clk.Fire(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	evs := []events.CloudWatchEvent{<-got, <-got, <-got}
	cancel()
	<-done
	for i, ev := range evs {
		want := start.Add(time.Duration(i+1) * time.Minute)
		if !ev.Time.Equal(want) || ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" ||
			ev.Resources[0] != "arn:aws:events:eu-west-1:123456789012:rule/r" || string(ev.Detail) != "{}" {
			t.Fatalf("event %d = %+v", i, ev)
		}
	}
	if len(errs) != 1 {
		t.Fatalf("errors = %v; the schedule must go on after a failed run", errs)
	}
}

func TestRateFloor(t *testing.T) {
	if err := Run(context.Background(), Options{Rate: time.Millisecond}, nil, nil); err == nil {
		t.Fatal("a sub-second rate was accepted")
	}
}
