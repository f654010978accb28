package esm

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// BuildEvent builds the event Lambda delivers for records read from the stream
// streamARN: eventSource "aws:dynamodb", eventVersion "1.1" (unless the record
// carries another), eventSourceARN, and the dynamodb section with
// ApproximateCreationDateTime in whole seconds.
func BuildEvent(streamARN string, records ...types.Record) (events.DynamoDBEvent, error) {
	ev := events.DynamoDBEvent{Records: make([]events.DynamoDBEventRecord, 0, len(records))}
	region := regionOf(streamARN)
	for i, r := range records {
		er, err := buildRecord(streamARN, region, r)
		if err != nil {
			return events.DynamoDBEvent{}, fmt.Errorf("esm: record %d: %w", i, err)
		}
		ev.Records = append(ev.Records, er)
	}
	return ev, nil
}

func buildRecord(streamARN, region string, r types.Record) (events.DynamoDBEventRecord, error) {
	out := events.DynamoDBEventRecord{
		AWSRegion:      deref(r.AwsRegion),
		EventID:        deref(r.EventID),
		EventName:      string(r.EventName),
		EventSource:    "aws:dynamodb",
		EventVersion:   deref(r.EventVersion),
		EventSourceArn: streamARN,
	}
	if out.AWSRegion == "" {
		out.AWSRegion = region
	}
	if out.EventVersion == "" {
		out.EventVersion = "1.1"
	}
	if id := r.UserIdentity; id != nil {
		out.UserIdentity = &events.DynamoDBUserIdentity{Type: deref(id.Type), PrincipalID: deref(id.PrincipalId)}
	}
	if d := r.Dynamodb; d != nil {
		var err error
		c := &out.Change
		if d.ApproximateCreationDateTime != nil {
			// Lambda delivers whole epoch seconds.
			c.ApproximateCreationDateTime = events.SecondsEpochTime{Time: d.ApproximateCreationDateTime.Truncate(time.Second)}
		}
		if c.Keys, err = convertMap(d.Keys); err != nil {
			return out, fmt.Errorf("dynamodb.Keys: %w", err)
		}
		if c.NewImage, err = convertMap(d.NewImage); err != nil {
			return out, fmt.Errorf("dynamodb.NewImage: %w", err)
		}
		if c.OldImage, err = convertMap(d.OldImage); err != nil {
			return out, fmt.Errorf("dynamodb.OldImage: %w", err)
		}
		c.SequenceNumber = deref(d.SequenceNumber)
		if d.SizeBytes != nil {
			c.SizeBytes = *d.SizeBytes
		}
		c.StreamViewType = string(d.StreamViewType)
	}
	return out, nil
}

func convertMap(m map[string]types.AttributeValue) (map[string]events.DynamoDBAttributeValue, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		av, err := convert(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = av
	}
	return out, nil
}

// convert maps a stream attribute value onto the type Lambda events use.
func convert(v types.AttributeValue) (events.DynamoDBAttributeValue, error) {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value), nil
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value), nil
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value), nil
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value), nil
	case *types.AttributeValueMemberNULL:
		return events.NewNullAttribute(), nil
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(v.Value), nil
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(v.Value), nil
	case *types.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(v.Value), nil
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			av, err := convert(e)
			if err != nil {
				return events.DynamoDBAttributeValue{}, fmt.Errorf("[%d]: %w", i, err)
			}
			l[i] = av
		}
		return events.NewListAttribute(l), nil
	case *types.AttributeValueMemberM:
		m, err := convertMap(v.Value)
		if err != nil {
			return events.DynamoDBAttributeValue{}, err
		}
		if m == nil {
			m = map[string]events.DynamoDBAttributeValue{}
		}
		return events.NewMapAttribute(m), nil
	default:
		return events.DynamoDBAttributeValue{}, fmt.Errorf("unsupported attribute value %T", v)
	}
}

// regionOf returns the region field of an ARN (arn:aws:dynamodb:REGION:...).
func regionOf(arn string) string {
	parts := strings.SplitN(arn, ":", 5)
	if len(parts) < 5 {
		return ""
	}
	return parts[3]
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
