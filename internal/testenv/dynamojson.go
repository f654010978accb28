package testenv

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoJSON is item in DynamoDB JSON, as the AWS CLI and DynamoDB Streams
// show it and as schema/ describes it: {"b": {"N": "3"}, "k": {"B":
// "<base64>"}, ...}.
func DynamoJSON(item map[string]types.AttributeValue) map[string]any {
	out := make(map[string]any, len(item))
	for k, v := range item {
		out[k] = attrJSON(v)
	}
	return out
}

func attrJSON(av types.AttributeValue) any {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return map[string]any{"S": v.Value}
	case *types.AttributeValueMemberN:
		return map[string]any{"N": v.Value}
	case *types.AttributeValueMemberB:
		return map[string]any{"B": base64.StdEncoding.EncodeToString(v.Value)}
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": v.Value}
	case *types.AttributeValueMemberNULL:
		return map[string]any{"NULL": v.Value}
	case *types.AttributeValueMemberSS:
		return map[string]any{"SS": v.Value}
	case *types.AttributeValueMemberNS:
		return map[string]any{"NS": v.Value}
	case *types.AttributeValueMemberBS:
		bs := make([]string, len(v.Value))
		for i, b := range v.Value {
			bs[i] = base64.StdEncoding.EncodeToString(b)
		}
		return map[string]any{"BS": bs}
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, x := range v.Value {
			l[i] = attrJSON(x)
		}
		return map[string]any{"L": l}
	case *types.AttributeValueMemberM:
		return map[string]any{"M": DynamoJSON(v.Value)}
	}
	return map[string]any{"?": fmt.Sprintf("%T", av)}
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
