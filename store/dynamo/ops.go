package dynamo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Put, Update, UpdateIfVersion, Check and Delete build the caller's items
// for Writer.Write; the package documentation ("Your items") describes them.

// Put returns a put of item into table, committed only if every one of conds
// holds. Without conds the put is unconditional and replaces an item with
// the same key; to create an item only if it is new, pass
// expression.AttributeNotExists(expression.Name(<partition key>)).
func Put(table string, item any, conds ...expression.ConditionBuilder) (types.TransactWriteItem, error) {
	const op = "Put"
	if err := checkTable(op, table); err != nil {
		return types.TransactWriteItem{}, err
	}
	av, err := marshalMap(op, table, "item", item)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	e, err := build(op, table, nil, conds)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                           &table,
		Item:                                av,
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValuesOnConditionCheckFailure: returnOld(conds),
	}}, nil
}

// Update returns an update of the item at key in table (expression.Set, Add,
// Remove, Delete), committed only if every one of conds holds. Without
// conds, the update creates the item when it does not exist, as UpdateItem
// does.
func Update(table string, key any, update expression.UpdateBuilder, conds ...expression.ConditionBuilder) (types.TransactWriteItem, error) {
	return updateOp("Update", table, key, update, conds)
}

// UpdateIfVersion returns an update of the item at key in table under an
// optimistic version check: it commits only if the number attribute
// versionAttr (a top-level attribute) still equals version, the version the
// caller read, and every one of conds holds; it sets versionAttr to
// version+1 along with update. Version 0 means that the item has no
// versionAttr yet (a new item, which the update creates); versions count
// from 1.
//
// update must not write versionAttr itself; it may be the zero
// UpdateBuilder when the version bump is the whole change (the message is
// about the aggregate, and the bump serialises writers on it). update is not
// modified.
func UpdateIfVersion(table string, key any, versionAttr string, version int64, update expression.UpdateBuilder, conds ...expression.ConditionBuilder) (types.TransactWriteItem, error) {
	const op = "UpdateIfVersion"
	if err := checkTable(op, table); err != nil {
		return types.TransactWriteItem{}, err
	}
	switch {
	case versionAttr == "":
		return types.TransactWriteItem{}, &OperationError{Op: op, Table: table, Field: "version attribute",
			Reason: "name the number attribute that holds the item's version"}
	case strings.ContainsAny(versionAttr, ".[]"):
		return types.TransactWriteItem{}, &OperationError{Op: op, Table: table, Field: "version attribute",
			Reason: fmt.Sprintf("%q is a document path; the version must be a top-level number attribute (use Update with your own condition for a nested one)", versionAttr)}
	case version < 0:
		return types.TransactWriteItem{}, &OperationError{Op: op, Table: table, Field: "version",
			Reason: fmt.Sprintf("version %d is negative; pass the version you read (0 for an item that has none yet)", version)}
	}
	v := expression.Name(versionAttr)
	check := v.AttributeNotExists()
	if version > 0 {
		check = v.Equal(expression.Value(version))
	}
	all := append([]expression.ConditionBuilder{check}, conds...)
	own, err := expression.NewBuilder().WithUpdate(update).Build()
	var unset expression.UnsetParameterError
	switch {
	case errors.As(err, &unset):
		// The bump is the whole update.
		return updateOp(op, table, key, expression.Set(v, expression.Value(version+1)), all)
	case err != nil:
		return types.TransactWriteItem{}, &OperationError{Op: op, Table: table, Field: "update", Err: err,
			Reason: "the update cannot be built; check its operands (expression.Name, expression.Value)"}
	}
	for _, n := range own.Names() {
		if n == versionAttr {
			// DynamoDB would refuse two actions on one path ("Two document
			// paths overlap"), or the caller's would undo the bump.
			return types.TransactWriteItem{}, &OperationError{Op: op, Table: table, Field: "update",
				Reason: fmt.Sprintf("the update uses the version attribute %q; UpdateIfVersion sets it to version+1 itself: leave it out of the update", versionAttr)}
		}
	}
	it, err := updateOp(op, table, key, update, all)
	if err != nil {
		return it, err
	}
	// The builder's maps are shared by every copy of an UpdateBuilder, so
	// update.Set would add the bump to the caller's builder too. Add it to
	// the built expression instead, under placeholders the builder never
	// uses (it numbers its own: #0, :0, …).
	u := it.Update
	u.UpdateExpression = aws.String(withSet(aws.ToString(u.UpdateExpression), versionName+" = "+versionValue))
	u.ExpressionAttributeNames[versionName] = versionAttr
	u.ExpressionAttributeValues[versionValue] = numAttr(version + 1)
	return it, nil
}

// Placeholders of UpdateIfVersion's version bump.
const (
	versionName  = "#v"
	versionValue = ":v"
)

// withSet adds action to the SET clause of an update expression built by the
// expression builder, which writes one clause per line, each starting with
// its keyword ("SET #0 = :0, #1 = :1\nREMOVE #2\n"; a test pins the format).
func withSet(update, action string) string {
	lines := strings.Split(update, "\n")
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(l, "SET "); ok {
			lines[i] = "SET " + action + ", " + rest
			return strings.Join(lines, "\n")
		}
	}
	return "SET " + action + "\n" + update
}

// Check returns a condition check of the item at key in table: the
// transaction commits only if cond and every one of more hold; the item is
// not changed.
func Check(table string, key any, cond expression.ConditionBuilder, more ...expression.ConditionBuilder) (types.TransactWriteItem, error) {
	const op = "Check"
	if err := checkTable(op, table); err != nil {
		return types.TransactWriteItem{}, err
	}
	k, err := marshalMap(op, table, "key", key)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	if !cond.IsSet() {
		return types.TransactWriteItem{}, &OperationError{Op: op, Table: table, Field: "condition",
			Reason: "a condition check needs a condition (for example expression.AttributeExists(expression.Name(\"id\")))"}
	}
	e, err := build(op, table, nil, append([]expression.ConditionBuilder{cond}, more...))
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                           &table,
		Key:                                 k,
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, nil
}

// Delete returns a delete of the item at key in table, committed only if
// every one of conds holds (without conds it is unconditional; deleting an
// item that does not exist succeeds).
func Delete(table string, key any, conds ...expression.ConditionBuilder) (types.TransactWriteItem, error) {
	const op = "Delete"
	if err := checkTable(op, table); err != nil {
		return types.TransactWriteItem{}, err
	}
	k, err := marshalMap(op, table, "key", key)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	e, err := build(op, table, nil, conds)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName:                           &table,
		Key:                                 k,
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValuesOnConditionCheckFailure: returnOld(conds),
	}}, nil
}

func updateOp(op, table string, key any, update expression.UpdateBuilder, conds []expression.ConditionBuilder) (types.TransactWriteItem, error) {
	if err := checkTable(op, table); err != nil {
		return types.TransactWriteItem{}, err
	}
	k, err := marshalMap(op, table, "key", key)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	e, err := build(op, table, &update, conds)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                           &table,
		Key:                                 k,
		UpdateExpression:                    e.Update(),
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValuesOnConditionCheckFailure: returnOld(conds),
	}}, nil
}

// OperationError reports an item for Writer.Write that Put, Update,
// UpdateIfVersion, Check or Delete could not build. Nothing was sent.
type OperationError struct {
	Op    string // the constructor: "Put", "Update", …
	Table string
	// Field is what is wrong: "table", "item", "key", "condition",
	// "update", "version attribute" or "version".
	Field  string
	Reason string // what to fix
	// Err is the marshaller's or the expression builder's error, if any
	// (for example an expression.UnsetParameterError or an
	// *attributevalue.UnmarshalTypeError).
	Err error
}

func (e *OperationError) Error() string {
	s := fmt.Sprintf("dynamo: %s on table %q: %s: %s", e.Op, e.Table, e.Field, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *OperationError) Unwrap() error { return e.Err }

func checkTable(op, table string) error {
	if table == "" {
		return &OperationError{Op: op, Table: table, Field: "table", Reason: "the table name is required"}
	}
	return nil
}

// marshalMap marshals an item or key; a map of attribute values is taken as
// it is (attributevalue would marshal the SDK's structs field by field).
func marshalMap(op, table, field string, v any) (map[string]types.AttributeValue, error) {
	av, ok := v.(map[string]types.AttributeValue)
	if !ok {
		var err error
		if av, err = attributevalue.MarshalMap(v); err != nil {
			return nil, &OperationError{Op: op, Table: table, Field: field, Err: err,
				Reason: "it cannot be marshalled with attributevalue.MarshalMap; pass a struct (dynamodbav tags), a map[string]any or a map[string]types.AttributeValue"}
		}
	}
	if len(av) == 0 {
		return nil, &OperationError{Op: op, Table: table, Field: field,
			Reason: fmt.Sprintf("%T marshals to no attributes; pass a struct (dynamodbav tags), a map[string]any or a map[string]types.AttributeValue with at least the primary key", v)}
	}
	return av, nil
}

// build builds the update (if any) and the conjunction of conds. When the
// builder fails it tells which part failed, by building the parts alone.
func build(op, table string, update *expression.UpdateBuilder, conds []expression.ConditionBuilder) (expression.Expression, error) {
	b := expression.NewBuilder()
	if update != nil {
		b = b.WithUpdate(*update)
	}
	cond, hasCond := and(conds)
	if hasCond {
		b = b.WithCondition(cond)
	}
	if update == nil && !hasCond {
		// Nothing to build (an unconditional put or delete).
		return expression.Expression{}, nil
	}
	e, err := b.Build()
	if err == nil {
		return e, nil
	}
	field, reason := "condition", "the condition cannot be built; check its operands (expression.Name, expression.Value)"
	var unset expression.UnsetParameterError
	if errors.As(err, &unset) {
		reason = "a condition is the zero ConditionBuilder; build each with expression.Name(…).Equal(…), expression.AttributeNotExists(…) and the like"
	}
	if update != nil {
		_, uerr := expression.NewBuilder().WithUpdate(*update).Build()
		switch {
		case errors.As(uerr, &unset):
			field, reason = "update", "the update has no action; build one with expression.Set, Add, Remove or Delete"
		case uerr != nil:
			field, reason = "update", "the update cannot be built; check its operands (expression.Name, expression.Value)"
		}
	}
	return expression.Expression{}, &OperationError{Op: op, Table: table, Field: field, Reason: reason, Err: err}
}

// and joins conds with AND; false when there are none.
func and(conds []expression.ConditionBuilder) (expression.ConditionBuilder, bool) {
	switch len(conds) {
	case 0:
		return expression.ConditionBuilder{}, false
	case 1:
		return conds[0], true
	default:
		return expression.And(conds[0], conds[1], conds[2:]...), true
	}
}

// returnOld asks for the old item of a failed condition, when there is one.
func returnOld(conds []expression.ConditionBuilder) types.ReturnValuesOnConditionCheckFailure {
	if len(conds) == 0 {
		return ""
	}
	return types.ReturnValuesOnConditionCheckFailureAllOld
}
