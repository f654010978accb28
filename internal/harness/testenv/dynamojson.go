package testenv

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/internal/dynamojson"
)

// DynamoJSON is item in DynamoDB JSON, as the AWS CLI and DynamoDB Streams
// show it and as schema/ describes it: {"b": {"N": "3"}, "k": {"B":
// "<base64>"}, ...}; {} for a nil item.
func DynamoJSON(item map[string]types.AttributeValue) map[string]any {
	if item == nil {
		return map[string]any{}
	}
	return dynamojson.Item(item)
}

// ParseDynamoJSON is the inverse of DynamoJSON for the scalar, binary,
// boolean and string-set types (what outbox items hold).
func ParseDynamoJSON(b []byte) (map[string]types.AttributeValue, error) {
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	item := make(map[string]types.AttributeValue, len(raw))
	for name, av := range raw {
		if len(av) != 1 {
			return nil, fmt.Errorf("attribute %s: want one type, have %d", name, len(av))
		}
		for typ, v := range av {
			var err error
			switch typ {
			case "S":
				var s string
				err = json.Unmarshal(v, &s)
				item[name] = &types.AttributeValueMemberS{Value: s}
			case "N":
				var s string
				err = json.Unmarshal(v, &s)
				item[name] = &types.AttributeValueMemberN{Value: s}
			case "B":
				var s string
				if err = json.Unmarshal(v, &s); err == nil {
					var bs []byte
					bs, err = base64.StdEncoding.DecodeString(s)
					item[name] = &types.AttributeValueMemberB{Value: append([]byte{}, bs...)}
				}
			case "BOOL":
				var x bool
				err = json.Unmarshal(v, &x)
				item[name] = &types.AttributeValueMemberBOOL{Value: x}
			case "SS":
				var ss []string
				err = json.Unmarshal(v, &ss)
				item[name] = &types.AttributeValueMemberSS{Value: ss}
			default:
				err = fmt.Errorf("type %s is not supported here", typ)
			}
			if err != nil {
				return nil, fmt.Errorf("attribute %s: %w", name, err)
			}
		}
	}
	return item, nil
}
