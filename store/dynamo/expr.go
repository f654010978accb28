package dynamo

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
)

// The store's own expressions. Those that carry values or join several
// clauses are built with the SDK's expression builder, which keeps the
// placeholders, the names and the values in step. A constant condition on
// attributes alone, such as attribute_not_exists(#s), stays a string with
// names(): it reads at a glance, carries no value to get out of step, and on
// the writer's path is not rebuilt for every message.

// buildExpr builds b. The store's expressions hold only numbers and strings,
// which always marshal, so an error here is a bug; it is returned, never
// panicked on.
func buildExpr(what string, b expression.Builder) (expression.Expression, error) {
	e, err := b.Build()
	if err != nil {
		return expression.Expression{}, fmt.Errorf("dynamo: build the %s expression: %w", what, err)
	}
	return e, nil
}

// bucketAfter is the key condition of a bucket's items after a sequence
// number: b = bucket AND s > after.
func bucketAfter(bucket int, after int64) expression.KeyConditionBuilder {
	return expression.KeyAnd(
		expression.Key(attrBucket).Equal(expression.Value(bucket)),
		expression.Key(attrSeq).GreaterThan(expression.Value(after)))
}
