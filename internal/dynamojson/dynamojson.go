// Package dynamojson writes attribute values in DynamoDB JSON, as the AWS
// CLI and DynamoDB Streams show them and as schema/ describes them:
// {"b": {"N": "3"}, "k": {"B": "<base64>"}, ...}. It is the one encoder for
// lambda/handler's responses (EncodeItem) and internal/harness/testenv, which cannot
// import lambda/handler (its users' tests would import their own package).
package dynamojson

import (
	"encoding/base64"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Item is item in DynamoDB JSON; nil for a nil item.
func Item(item map[string]types.AttributeValue) map[string]any {
	if item == nil {
		return nil
	}
	out := make(map[string]any, len(item))
	for k, v := range item {
		out[k] = Value(v)
	}
	return out
}

// Value is av in DynamoDB JSON; nil for a type the SDK does not define.
func Value(av types.AttributeValue) any {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return map[string]any{"S": v.Value}
	case *types.AttributeValueMemberN:
		return map[string]any{"N": v.Value}
	case *types.AttributeValueMemberB:
		return map[string]any{"B": base64.StdEncoding.EncodeToString(v.Value)}
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
	case *types.AttributeValueMemberM:
		return map[string]any{"M": Item(v.Value)}
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = Value(e)
		}
		return map[string]any{"L": l}
	case *types.AttributeValueMemberNULL:
		return map[string]any{"NULL": true}
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": v.Value}
	}
	return nil
}
