package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// Heartbeat implements outbox.Store: a PutItem of pk "relays", sk id with
// seen = now. The item expires (table TTL on x) ttl after now or the wall
// clock, whichever is later, when it can no longer count as live;
// LiveRelays filters on seen, not on the TTL, since TTL deletion is late by
// up to days.
func (s *Store) Heartbeat(ctx context.Context, id string, now time.Time, ttl time.Duration) error {
	if id == "" {
		return errors.New("dynamo: heartbeat: relay id is empty")
	}
	if ttl <= 0 {
		return fmt.Errorf("dynamo: heartbeat of %s: ttl %v is not positive", id, ttl)
	}
	item := controlKey(relaysPK, id)
	item[attrSeen] = numAttr(millis(now))
	item[attrTTL] = numAttr(ttlSeconds(expiresAt(now, ttl)))
	item[attrVersion] = numAttr(outbox.FormatVersion)
	if _, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: str(s.tables.Control), Item: item}); err != nil {
		return fmt.Errorf("dynamo: heartbeat of %s: %w", id, err)
	}
	return nil
}

// LiveRelays implements outbox.Store: a consistent Query of pk "relays"
// filtered on seen > now-ttl.
func (s *Store) LiveRelays(ctx context.Context, now time.Time, ttl time.Duration) ([]string, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("dynamo: live relays: ttl %v is not positive", ttl)
	}
	var (
		ids   []string
		start map[string]types.AttributeValue
	)
	for {
		out, err := s.client.Query(ctx, &dynamodb.QueryInput{
			TableName:                str(s.tables.Control),
			KeyConditionExpression:   str("#pk = :pk"),
			FilterExpression:         str("#seen > :since"),
			ProjectionExpression:     str("#sk"),
			ExpressionAttributeNames: names(attrPK, attrSK, attrSeen),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": strAttr(relaysPK), ":since": numAttr(millis(now.Add(-ttl))),
			},
			ConsistentRead:    new(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, fmt.Errorf("dynamo: live relays: %w", err)
		}
		for _, item := range out.Items {
			if sk, ok := item[attrSK].(*types.AttributeValueMemberS); ok {
				ids = append(ids, sk.Value)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	slices.Sort(ids)
	return ids, nil
}
