package ddbmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// The model over DynamoDB's HTTP protocol (JSON 1.0, the operation in
// X-Amz-Target), so that a process with the real SDK client — the relay
// Lambda's bootstrap — calls it as it calls DynamoDB: GetItem, PutItem,
// UpdateItem, DeleteItem, Query, BatchGetItem, BatchWriteItem,
// TransactWriteItems, DescribeTable, CreateTable, UpdateTimeToLive,
// DescribeTimeToLive and ListTables. Requests are not signed-checked.

// Serve serves the model for callers of one role on a new listener on
// 127.0.0.1 and returns its URL and what stops it.
func (db *DB) Serve(role string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: db.Handler(role), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

var requestIDs atomic.Int64

// Handler is the model's HTTP API, counting calls under role.
func (db *DB) Handler(role string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		op := r.Header.Get("X-Amz-Target")
		if i := strings.LastIndexByte(op, '.'); i >= 0 {
			op = op[i+1:]
		}
		out, err := db.serve(WithRole(r.Context(), role), op, body)
		status := http.StatusOK
		if err != nil {
			status, out = errorBody(err)
		}
		h := w.Header()
		h.Set("Content-Type", "application/x-amz-json-1.0")
		h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(out)), 10))
		h.Set("X-Amzn-Requestid", "model-"+strconv.FormatInt(requestIDs.Add(1), 10))
		w.WriteHeader(status)
		_, _ = w.Write(out)
	})
}

func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		var api smithy.APIError
		if errors.As(err, &api) {
			return err
		}
		return &smithy.GenericAPIError{Code: "SerializationException", Message: err.Error(), Fault: smithy.FaultClient}
	}
	return nil
}

type common struct {
	TableName                           *string
	ConditionExpression                 *string
	ExpressionAttributeNames            map[string]string
	ExpressionAttributeValues           avMap
	ReturnConsumedCapacity              types.ReturnConsumedCapacity
	ReturnValues                        types.ReturnValue
	ReturnValuesOnConditionCheckFailure types.ReturnValuesOnConditionCheckFailure
}

type twiWire struct {
	ConditionCheck *struct {
		common
		Key avMap
	}
	Put *struct {
		common
		Item avMap
	}
	Delete *struct {
		common
		Key avMap
	}
	Update *struct {
		common
		Key              avMap
		UpdateExpression *string
	}
}

type keysWire struct {
	Keys                     []avMap
	ConsistentRead           *bool
	ProjectionExpression     *string
	ExpressionAttributeNames map[string]string
}

func (db *DB) serve(ctx context.Context, op string, body []byte) ([]byte, error) {
	w := &jw{}
	switch op {
	case "GetItem":
		var in struct {
			common
			Key                  avMap
			ConsistentRead       *bool
			ProjectionExpression *string
		}
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key.item(), ConsistentRead: in.ConsistentRead,
			ProjectionExpression: in.ProjectionExpression, ExpressionAttributeNames: in.ExpressionAttributeNames, ReturnConsumedCapacity: in.ReturnConsumedCapacity})
		if err != nil {
			return nil, err
		}
		w.obj(func(f func(string) bool) {
			if out.Item != nil && f("Item") {
				w.item(out.Item)
			}
			if out.ConsumedCapacity != nil && f("ConsumedCapacity") {
				w.capacity(out.ConsumedCapacity)
			}
		})
	case "PutItem", "DeleteItem", "UpdateItem":
		var in struct {
			common
			Item             avMap
			Key              avMap
			UpdateExpression *string
		}
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		var attrs Item
		var cc *types.ConsumedCapacity
		var err error
		switch op {
		case "PutItem":
			var out *dynamodb.PutItemOutput
			out, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: in.TableName, Item: in.Item.item(), ConditionExpression: in.ConditionExpression,
				ExpressionAttributeNames: in.ExpressionAttributeNames, ExpressionAttributeValues: in.ExpressionAttributeValues.item(),
				ReturnConsumedCapacity: in.ReturnConsumedCapacity, ReturnValues: in.ReturnValues, ReturnValuesOnConditionCheckFailure: in.ReturnValuesOnConditionCheckFailure})
			if err == nil {
				attrs, cc = out.Attributes, out.ConsumedCapacity
			}
		case "DeleteItem":
			var out *dynamodb.DeleteItemOutput
			out, err = db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: in.TableName, Key: in.Key.item(), ConditionExpression: in.ConditionExpression,
				ExpressionAttributeNames: in.ExpressionAttributeNames, ExpressionAttributeValues: in.ExpressionAttributeValues.item(),
				ReturnConsumedCapacity: in.ReturnConsumedCapacity, ReturnValues: in.ReturnValues, ReturnValuesOnConditionCheckFailure: in.ReturnValuesOnConditionCheckFailure})
			if err == nil {
				attrs, cc = out.Attributes, out.ConsumedCapacity
			}
		default:
			var out *dynamodb.UpdateItemOutput
			out, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: in.TableName, Key: in.Key.item(), UpdateExpression: in.UpdateExpression,
				ConditionExpression: in.ConditionExpression, ExpressionAttributeNames: in.ExpressionAttributeNames,
				ExpressionAttributeValues: in.ExpressionAttributeValues.item(), ReturnConsumedCapacity: in.ReturnConsumedCapacity,
				ReturnValues: in.ReturnValues, ReturnValuesOnConditionCheckFailure: in.ReturnValuesOnConditionCheckFailure})
			if err == nil {
				attrs, cc = out.Attributes, out.ConsumedCapacity
			}
		}
		if err != nil {
			return nil, err
		}
		w.obj(func(f func(string) bool) {
			if attrs != nil && f("Attributes") {
				w.item(attrs)
			}
			if cc != nil && f("ConsumedCapacity") {
				w.capacity(cc)
			}
		})
	case "Query":
		var in struct {
			common
			IndexName              *string
			KeyConditionExpression *string
			FilterExpression       *string
			ProjectionExpression   *string
			ConsistentRead         *bool
			Limit                  *int32
			ExclusiveStartKey      avMap
			ScanIndexForward       *bool
			Select                 types.Select
		}
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: in.TableName, IndexName: in.IndexName, KeyConditionExpression: in.KeyConditionExpression,
			FilterExpression: in.FilterExpression, ProjectionExpression: in.ProjectionExpression, ExpressionAttributeNames: in.ExpressionAttributeNames,
			ExpressionAttributeValues: in.ExpressionAttributeValues.item(), ConsistentRead: in.ConsistentRead, Limit: in.Limit,
			ExclusiveStartKey: in.ExclusiveStartKey.item(), ScanIndexForward: in.ScanIndexForward, Select: in.Select, ReturnConsumedCapacity: in.ReturnConsumedCapacity})
		if err != nil {
			return nil, err
		}
		w.obj(func(f func(string) bool) {
			f("Count")
			w.raw(strconv.Itoa(int(out.Count)))
			f("ScannedCount")
			w.raw(strconv.Itoa(int(out.ScannedCount)))
			if in.Select != types.SelectCount && f("Items") {
				w.itemList(out.Items)
			}
			if out.LastEvaluatedKey != nil && f("LastEvaluatedKey") {
				w.item(out.LastEvaluatedKey)
			}
			if out.ConsumedCapacity != nil && f("ConsumedCapacity") {
				w.capacity(out.ConsumedCapacity)
			}
		})
	case "BatchGetItem":
		var in struct {
			RequestItems           map[string]keysWire
			ReturnConsumedCapacity types.ReturnConsumedCapacity
		}
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		req := map[string]types.KeysAndAttributes{}
		for t, k := range in.RequestItems {
			req[t] = types.KeysAndAttributes{Keys: items(k.Keys), ConsistentRead: k.ConsistentRead, ProjectionExpression: k.ProjectionExpression,
				ExpressionAttributeNames: k.ExpressionAttributeNames}
		}
		out, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req, ReturnConsumedCapacity: in.ReturnConsumedCapacity})
		if err != nil {
			return nil, err
		}
		w.obj(func(f func(string) bool) {
			f("Responses")
			w.obj(func(g func(string) bool) {
				for t, its := range out.Responses {
					g(t)
					w.itemList(its)
				}
			})
			f("UnprocessedKeys")
			w.obj(func(g func(string) bool) {
				for t, ka := range out.UnprocessedKeys {
					g(t)
					w.obj(func(h func(string) bool) {
						h("Keys")
						w.itemList(ka.Keys)
						if ka.ConsistentRead != nil && h("ConsistentRead") {
							w.raw(strconv.FormatBool(*ka.ConsistentRead))
						}
						if ka.ProjectionExpression != nil && h("ProjectionExpression") {
							w.str(*ka.ProjectionExpression)
						}
						if ka.ExpressionAttributeNames != nil && h("ExpressionAttributeNames") {
							w.strMap(ka.ExpressionAttributeNames)
						}
					})
				}
			})
			if out.ConsumedCapacity != nil && f("ConsumedCapacity") {
				w.capacities(out.ConsumedCapacity)
			}
		})
	case "BatchWriteItem":
		var in struct {
			RequestItems map[string][]struct {
				PutRequest    *struct{ Item avMap }
				DeleteRequest *struct{ Key avMap }
			}
			ReturnConsumedCapacity types.ReturnConsumedCapacity
		}
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		req := map[string][]types.WriteRequest{}
		for t, rs := range in.RequestItems {
			for _, r := range rs {
				var wr types.WriteRequest
				if r.PutRequest != nil {
					wr.PutRequest = &types.PutRequest{Item: r.PutRequest.Item.item()}
				}
				if r.DeleteRequest != nil {
					wr.DeleteRequest = &types.DeleteRequest{Key: r.DeleteRequest.Key.item()}
				}
				req[t] = append(req[t], wr)
			}
		}
		out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: req, ReturnConsumedCapacity: in.ReturnConsumedCapacity})
		if err != nil {
			return nil, err
		}
		w.obj(func(f func(string) bool) {
			f("UnprocessedItems")
			w.obj(func(g func(string) bool) {
				for t, rs := range out.UnprocessedItems {
					g(t)
					w.raw("[")
					for i, r := range rs {
						w.comma(i)
						if r.PutRequest != nil {
							w.raw(`{"PutRequest":{"Item":`)
							w.item(r.PutRequest.Item)
						} else {
							w.raw(`{"DeleteRequest":{"Key":`)
							w.item(r.DeleteRequest.Key)
						}
						w.raw("}}")
					}
					w.raw("]")
				}
			})
			if out.ConsumedCapacity != nil && f("ConsumedCapacity") {
				w.capacities(out.ConsumedCapacity)
			}
		})
	case "TransactWriteItems":
		var in struct {
			TransactItems          []twiWire
			ClientRequestToken     *string
			ReturnConsumedCapacity types.ReturnConsumedCapacity
		}
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		req := &dynamodb.TransactWriteItemsInput{ClientRequestToken: in.ClientRequestToken, ReturnConsumedCapacity: in.ReturnConsumedCapacity}
		for _, it := range in.TransactItems {
			var ti types.TransactWriteItem
			switch {
			case it.Put != nil:
				c := it.Put.common
				ti.Put = &types.Put{TableName: c.TableName, Item: it.Put.Item.item(), ConditionExpression: c.ConditionExpression,
					ExpressionAttributeNames: c.ExpressionAttributeNames, ExpressionAttributeValues: c.ExpressionAttributeValues.item(),
					ReturnValuesOnConditionCheckFailure: c.ReturnValuesOnConditionCheckFailure}
			case it.Update != nil:
				c := it.Update.common
				ti.Update = &types.Update{TableName: c.TableName, Key: it.Update.Key.item(), UpdateExpression: it.Update.UpdateExpression,
					ConditionExpression: c.ConditionExpression, ExpressionAttributeNames: c.ExpressionAttributeNames,
					ExpressionAttributeValues: c.ExpressionAttributeValues.item(), ReturnValuesOnConditionCheckFailure: c.ReturnValuesOnConditionCheckFailure}
			case it.Delete != nil:
				c := it.Delete.common
				ti.Delete = &types.Delete{TableName: c.TableName, Key: it.Delete.Key.item(), ConditionExpression: c.ConditionExpression,
					ExpressionAttributeNames: c.ExpressionAttributeNames, ExpressionAttributeValues: c.ExpressionAttributeValues.item(),
					ReturnValuesOnConditionCheckFailure: c.ReturnValuesOnConditionCheckFailure}
			case it.ConditionCheck != nil:
				c := it.ConditionCheck.common
				ti.ConditionCheck = &types.ConditionCheck{TableName: c.TableName, Key: it.ConditionCheck.Key.item(), ConditionExpression: c.ConditionExpression,
					ExpressionAttributeNames: c.ExpressionAttributeNames, ExpressionAttributeValues: c.ExpressionAttributeValues.item(),
					ReturnValuesOnConditionCheckFailure: c.ReturnValuesOnConditionCheckFailure}
			}
			req.TransactItems = append(req.TransactItems, ti)
		}
		out, err := db.TransactWriteItems(ctx, req)
		if err != nil {
			return nil, err
		}
		w.obj(func(f func(string) bool) {
			if out.ConsumedCapacity != nil && f("ConsumedCapacity") {
				w.capacities(out.ConsumedCapacity)
			}
		})
	case "DescribeTable":
		var in dynamodb.DescribeTableInput
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		out, err := db.DescribeTable(ctx, &in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"Table": tableWire(out.Table)})
	case "CreateTable":
		var in dynamodb.CreateTableInput
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		out, err := db.CreateTable(ctx, &in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"TableDescription": tableWire(out.TableDescription)})
	case "UpdateTable":
		var in dynamodb.UpdateTableInput
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		out, err := db.UpdateTable(ctx, &in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"TableDescription": tableWire(out.TableDescription)})
	case "UpdateTimeToLive":
		var in dynamodb.UpdateTimeToLiveInput
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		out, err := db.UpdateTimeToLive(ctx, &in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"TimeToLiveSpecification": map[string]any{
			"AttributeName": aws.ToString(out.TimeToLiveSpecification.AttributeName), "Enabled": aws.ToBool(out.TimeToLiveSpecification.Enabled)}})
	case "DescribeTimeToLive":
		var in dynamodb.DescribeTimeToLiveInput
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		out, err := db.DescribeTimeToLive(ctx, &in)
		if err != nil {
			return nil, err
		}
		d := map[string]any{"TimeToLiveStatus": out.TimeToLiveDescription.TimeToLiveStatus}
		if n := out.TimeToLiveDescription.AttributeName; n != nil {
			d["AttributeName"] = *n
		}
		return json.Marshal(map[string]any{"TimeToLiveDescription": d})
	case "ListTables":
		var in dynamodb.ListTablesInput
		if err := decode(body, &in); err != nil {
			return nil, err
		}
		out, err := db.ListTables(ctx, &in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"TableNames": out.TableNames})
	default:
		return nil, &smithy.GenericAPIError{Code: "UnknownOperationException", Message: fmt.Sprintf("the model does not serve %q", op), Fault: smithy.FaultClient}
	}
	return w.b, nil
}

// tableWire is a table description as DynamoDB writes it (times in epoch
// seconds).
func tableWire(d *types.TableDescription) map[string]any {
	out := map[string]any{
		"TableName": aws.ToString(d.TableName), "TableArn": aws.ToString(d.TableArn), "TableId": aws.ToString(d.TableId),
		"TableStatus": d.TableStatus, "ItemCount": aws.ToInt64(d.ItemCount), "TableSizeBytes": aws.ToInt64(d.TableSizeBytes),
		"CreationDateTime":     float64(aws.ToTime(d.CreationDateTime).UnixMilli()) / 1000,
		"AttributeDefinitions": d.AttributeDefinitions, "KeySchema": d.KeySchema,
	}
	if d.BillingModeSummary != nil {
		out["BillingModeSummary"] = map[string]any{"BillingMode": d.BillingModeSummary.BillingMode}
	}
	if p := d.ProvisionedThroughput; p != nil {
		out["ProvisionedThroughput"] = map[string]any{"ReadCapacityUnits": aws.ToInt64(p.ReadCapacityUnits),
			"WriteCapacityUnits": aws.ToInt64(p.WriteCapacityUnits), "NumberOfDecreasesToday": aws.ToInt64(p.NumberOfDecreasesToday)}
	}
	if s := d.StreamSpecification; s != nil {
		out["StreamSpecification"] = map[string]any{"StreamEnabled": aws.ToBool(s.StreamEnabled), "StreamViewType": s.StreamViewType}
		out["LatestStreamArn"], out["LatestStreamLabel"] = aws.ToString(d.LatestStreamArn), aws.ToString(d.LatestStreamLabel)
	}
	return out
}

// errorBody writes an error as DynamoDB does: its type in __type, its
// message, and the exception's own fields.
func errorBody(err error) (int, []byte) {
	w := &jw{}
	code, msg := "InternalServerError", err.Error()
	var api smithy.APIError
	if errors.As(err, &api) {
		code, msg = api.ErrorCode(), api.ErrorMessage()
	}
	status := http.StatusBadRequest
	if code == "InternalServerError" {
		status = http.StatusInternalServerError
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		code, status = "RequestTimeout", http.StatusInternalServerError
	}
	ns := "com.amazonaws.dynamodb.v20120810#"
	if code == "ValidationException" || code == "SerializationException" {
		ns = "com.amazon.coral.validate#"
	}
	w.obj(func(f func(string) bool) {
		f("__type")
		w.str(ns + code)
		f("message")
		w.str(msg)
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) && ccf.Item != nil && f("Item") {
			w.item(ccf.Item)
		}
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) && f("CancellationReasons") {
			w.raw("[")
			for i, r := range tce.CancellationReasons {
				w.comma(i)
				w.obj(func(g func(string) bool) {
					g("Code")
					w.str(aws.ToString(r.Code))
					if r.Message != nil && g("Message") {
						w.str(*r.Message)
					}
					if r.Item != nil && g("Item") {
						w.item(r.Item)
					}
				})
			}
			w.raw("]")
		}
		var pte *types.ProvisionedThroughputExceededException
		if errors.As(err, &pte) && f("ThrottlingReasons") {
			w.raw("[")
			for i, r := range pte.ThrottlingReasons {
				w.comma(i)
				w.raw(`{"reason":`)
				w.str(aws.ToString(r.Reason))
				w.raw(`,"resource":`)
				w.str(aws.ToString(r.Resource))
				w.raw("}")
			}
			w.raw("]")
		}
	})
	return status, w.b
}
