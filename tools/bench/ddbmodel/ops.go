package ddbmodel

import (
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const (
	maxItemBytes  = 400 * 1024
	maxQueryBytes = 1 << 20
)

// exprs parses a call's expressions and checks its placeholders as
// DynamoDB does: every one used is given, every one given is used.
func exprs(names map[string]string, values Item, list ...struct {
	kind exprKind
	text *string
}) ([]*parsed, *evalEnv, error) {
	out := make([]*parsed, len(list))
	usedN, usedV := map[string]bool{}, map[string]bool{}
	any := false
	for i, e := range list {
		if e.text == nil {
			continue
		}
		any = true
		p, err := parse(e.kind, *e.text)
		if err != nil {
			return nil, nil, validation("%v", err)
		}
		out[i] = p
		for _, n := range p.names {
			usedN[n] = true
		}
		for _, v := range p.values {
			usedV[v] = true
		}
	}
	if !any && (len(names) > 0 || len(values) > 0) {
		return nil, nil, validation("ExpressionAttributeNames and ExpressionAttributeValues can only be specified when using expressions")
	}
	for n := range names {
		if !usedN[n] {
			return nil, nil, validation("Value provided in ExpressionAttributeNames unused in expressions: keys: {%s}", n)
		}
	}
	for v, av := range values {
		if !usedV[v] {
			return nil, nil, validation("Value provided in ExpressionAttributeValues unused in expressions: keys: {%s}", v)
		}
		if err := validValue(av); err != nil {
			return nil, nil, validation("ExpressionAttributeValues contains invalid value: %v for key %s", err, v)
		}
	}
	for n := range usedN {
		if _, ok := names[n]; !ok {
			return nil, nil, validation("An expression attribute name used in the document path is not defined; attribute name: %s", n)
		}
	}
	for v := range usedV {
		if _, ok := values[v]; !ok {
			return nil, nil, validation("An expression attribute value used in expression is not defined; attribute value: %s", v)
		}
	}
	return out, &evalEnv{names: names, values: values}, nil
}

type exprArg = struct {
	kind exprKind
	text *string
}

func consumed(rc types.ReturnConsumedCapacity, table string, units float64, write bool) *types.ConsumedCapacity {
	if rc == "" || rc == types.ReturnConsumedCapacityNone {
		return nil
	}
	c := &types.ConsumedCapacity{TableName: aws.String(table), CapacityUnits: aws.Float64(units)}
	if write {
		c.WriteCapacityUnits = aws.Float64(units)
	} else {
		c.ReadCapacityUnits = aws.Float64(units)
	}
	if rc == types.ReturnConsumedCapacityIndexes {
		c.Table = &types.Capacity{CapacityUnits: aws.Float64(units)}
	}
	return c
}

func (db *DB) wrate() (rate, burst float64) {
	return db.cfg.WCUPerKey, db.cfg.WCUPerKey * db.cfg.BurstSeconds
}

func (db *DB) rrate() (rate, burst float64) {
	return db.cfg.RCUPerKey, db.cfg.RCUPerKey * db.cfg.BurstSeconds
}

// takeWrite admits a write of cost units on a partition key.
func (db *DB) takeWrite(p *partition, now time.Time, cost float64) bool {
	rate, burst := db.wrate()
	return rate < 0 || p.w.take(now, rate, burst, cost)
}

func (db *DB) admitRead(p *partition, now time.Time) bool {
	rate, burst := db.rrate()
	return rate < 0 || p.r.admit(now, rate, burst)
}

func checkItem(it Item) error {
	if len(it) == 0 {
		return validation("One or more parameter values were invalid: the item is empty")
	}
	for k, v := range it {
		if k == "" {
			return validation("One or more parameter values were invalid: an attribute name is empty")
		}
		if err := validValue(v); err != nil {
			return validation("One or more parameter values were invalid: %v (attribute %s)", err, k)
		}
	}
	if n := ItemSize(it); n > maxItemBytes {
		return validation("Item size has exceeded the maximum allowed size")
	}
	return nil
}

func checkKeyValues(t *table, it Item) error {
	for _, k := range []keyDef{t.hash, t.rng} {
		if k.name == "" {
			continue
		}
		switch v := it[k.name].(type) {
		case *types.AttributeValueMemberS:
			if v.Value == "" {
				return validation("One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: %s", k.name)
			}
		case *types.AttributeValueMemberB:
			if len(v.Value) == 0 {
				return validation("One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty binary value. Key: %s", k.name)
			}
		}
	}
	return nil
}

// GetItem reads one item.
func (db *DB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	var out *dynamodb.GetItemOutput
	err := db.call(ctx, "GetItem", func(now time.Time, c *callCount) error {
		t, err := db.table(aws.ToString(in.TableName))
		if err != nil {
			return err
		}
		c.table = t.name
		ps, env, err := exprs(in.ExpressionAttributeNames, nil, exprArg{kindProj, in.ProjectionExpression})
		if err != nil {
			return err
		}
		pk, rk, err := t.key(in.Key)
		if err != nil {
			return err
		}
		p := t.part(pk)
		if !db.admitRead(p, now) {
			c.throttled = true
			return throttled(t, false)
		}
		it := t.get(pk, rk)
		u := ReadUnits(ItemSize(it), aws.ToBool(in.ConsistentRead), false)
		p.r.pay(u)
		c.charge(t.name, u)
		if it != nil && ps[0] != nil {
			if it, err = env.project(it, ps[0].proj); err != nil {
				return err
			}
		}
		out = &dynamodb.GetItemOutput{Item: it, ConsumedCapacity: consumed(in.ReturnConsumedCapacity, t.name, u, false)}
		return nil
	})
	return out, err
}

// write is one item write, single or in a transaction, evaluated against
// the table as it is.
type write struct {
	t      *table
	pk     string
	rk     types.AttributeValue
	kind   string // "Put", "Update", "Delete", "ConditionCheck"
	item   Item   // Put: the new item; Update, Delete, ConditionCheck: the key
	update *parsed
	cond   *parsed
	env    *evalEnv
	// Filled in by prepare.
	old, new Item
	units    float64
}

func (db *DB) newWrite(kind string, tableName *string, item Item, update, cond *string, names map[string]string, values Item) (*write, error) {
	t, err := db.table(aws.ToString(tableName))
	if err != nil {
		return nil, err
	}
	w := &write{t: t, kind: kind, item: item}
	if kind == "Put" {
		if err := checkItem(item); err != nil {
			return nil, err
		}
		w.pk, w.rk, err = t.keyOf(item)
	} else {
		w.pk, w.rk, err = t.key(item)
	}
	if err != nil {
		return nil, err
	}
	if err := checkKeyValues(t, item); err != nil {
		return nil, err
	}
	ps, env, err := exprs(names, values, exprArg{kindUpdate, update}, exprArg{kindCond, cond})
	if err != nil {
		return nil, err
	}
	if kind == "Update" && ps[0] == nil {
		return nil, validation("UpdateExpression is required")
	}
	if kind == "ConditionCheck" && ps[1] == nil {
		return nil, validation("ConditionExpression is required for a ConditionCheck")
	}
	w.update, w.cond, w.env = ps[0], ps[1], env
	return w, nil
}

// prepare computes the item before and after, and the write's units
// (transactional: twice); ok is false when the condition fails. The
// condition is evaluated first: an update that would fail (an ADD to a
// string) is not evaluated when the condition refuses the write, as on
// DynamoDB.
func (w *write) prepare(transactional bool) (ok bool, err error) {
	w.old = w.t.get(w.pk, w.rk)
	if w.cond != nil {
		if ok, err = w.env.cond(w.old, w.cond.cond); err != nil || !ok {
			w.new = w.old
			w.units = WriteUnits(ItemSize(w.old), transactional)
			return false, err
		}
	}
	switch w.kind {
	case "Put":
		w.new = w.item
	case "Update":
		base := w.old
		if base == nil {
			base = maps.Clone(w.item)
		}
		if w.new, err = w.env.apply(base, w.update.update); err != nil {
			return false, err
		}
		for _, k := range []string{w.t.hash.name, w.t.rng.name} {
			if k != "" && !equal(w.new[k], w.item[k]) {
				return false, validation("One or more parameter values were invalid: Cannot update attribute %s. This attribute is part of the key", k)
			}
		}
		if ItemSize(w.new) > maxItemBytes {
			return false, validation("Item size to update has exceeded the maximum allowed size")
		}
		for k, v := range w.new {
			if err := validValue(v); err != nil {
				return false, validation("%v (attribute %s)", err, k)
			}
		}
	case "Delete", "ConditionCheck":
		w.new = w.old
		if w.kind == "Delete" {
			w.new = nil
		}
	}
	w.units = WriteUnits(max(ItemSize(w.old), ItemSize(w.new)), transactional)
	return true, nil
}

func (db *DB) single(ctx context.Context, op string, w func() (*write, error), rc types.ReturnConsumedCapacity, returnOld bool,
	done func(w *write, cc *types.ConsumedCapacity)) error {
	return db.call(ctx, op, func(now time.Time, c *callCount) error {
		wr, err := w()
		if err != nil {
			return err
		}
		c.table = wr.t.name
		ok, err := wr.prepare(false)
		if err != nil {
			return err
		}
		if !db.takeWrite(wr.t.part(wr.pk), now, wr.units) {
			c.throttled = true
			return throttled(wr.t, true)
		}
		c.charge(wr.t.name, wr.units)
		if !ok {
			return conditionFailed(wr.old, returnOld)
		}
		if wr.kind != "ConditionCheck" {
			db.put(wr.t, wr.pk, wr.rk, wr.new, now)
		}
		done(wr, consumed(rc, wr.t.name, wr.units, true))
		return nil
	})
}

// PutItem writes an item, if its condition holds.
func (db *DB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	var out *dynamodb.PutItemOutput
	err := db.single(ctx, "PutItem", func() (*write, error) {
		return db.newWrite("Put", in.TableName, in.Item, nil, in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	}, in.ReturnConsumedCapacity, in.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld,
		func(w *write, cc *types.ConsumedCapacity) {
			out = &dynamodb.PutItemOutput{ConsumedCapacity: cc}
			if in.ReturnValues == types.ReturnValueAllOld {
				out.Attributes = w.old
			}
		})
	return out, err
}

// DeleteItem deletes an item, if its condition holds.
func (db *DB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	var out *dynamodb.DeleteItemOutput
	err := db.single(ctx, "DeleteItem", func() (*write, error) {
		return db.newWrite("Delete", in.TableName, in.Key, nil, in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	}, in.ReturnConsumedCapacity, in.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld,
		func(w *write, cc *types.ConsumedCapacity) {
			out = &dynamodb.DeleteItemOutput{ConsumedCapacity: cc}
			if in.ReturnValues == types.ReturnValueAllOld {
				out.Attributes = w.old
			}
		})
	return out, err
}

// UpdateItem updates (or creates) an item, if its condition holds.
func (db *DB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	var out *dynamodb.UpdateItemOutput
	err := db.single(ctx, "UpdateItem", func() (*write, error) {
		return db.newWrite("Update", in.TableName, in.Key, in.UpdateExpression, in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	}, in.ReturnConsumedCapacity, in.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld,
		func(w *write, cc *types.ConsumedCapacity) {
			out = &dynamodb.UpdateItemOutput{ConsumedCapacity: cc}
			switch in.ReturnValues {
			case types.ReturnValueAllOld:
				out.Attributes = w.old
			case types.ReturnValueAllNew:
				out.Attributes = w.new
			case types.ReturnValueUpdatedOld, types.ReturnValueUpdatedNew:
				src := w.new
				if in.ReturnValues == types.ReturnValueUpdatedOld {
					src = w.old
				}
				out.Attributes = Item{}
				for _, n := range w.updated() {
					if v, ok := src[n]; ok {
						out.Attributes[n] = v
					}
				}
			}
		})
	return out, err
}

// updated names the top-level attributes an update's actions name.
func (w *write) updated() []string {
	var out []string
	u := w.update.update
	add := func(p path) {
		if n, err := w.env.name(p[0]); err == nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, s := range u.sets {
		add(s.path)
	}
	for _, p := range u.removes {
		add(p)
	}
	for _, s := range append(slices.Clone(u.adds), u.deletes...) {
		add(s.path)
	}
	return out
}

// keyCond is a Query's key condition: the partition key value and a
// condition on the sort key.
type keyCond struct {
	pk     string
	op     string // "", "=", "<", "<=", ">", ">=", "BETWEEN", "begins_with"
	lo, hi types.AttributeValue
}

func (db *DB) keyCondition(t *table, c *cond, env *evalEnv) (keyCond, error) {
	var kc keyCond
	var parts []*cond
	if c.kind == cAnd {
		parts = c.children
	} else {
		parts = []*cond{c}
	}
	bad := validation("Query key condition not supported")
	if len(parts) > 2 {
		return kc, bad
	}
	havePK := false
	for _, p := range parts {
		if p.kind == cAnd || p.kind == cOr || p.kind == cNot || p.kind == cIn {
			return kc, bad
		}
		if p.args[0].kind != opPath || len(p.args[0].path) != 1 {
			return kc, bad
		}
		name, err := env.name(p.args[0].path[0])
		if err != nil {
			return kc, err
		}
		vals := make([]types.AttributeValue, 0, 2)
		for _, a := range p.args[1:] {
			if a.kind != opValue {
				return kc, bad
			}
			v, err := env.value(a.value)
			if err != nil {
				return kc, err
			}
			vals = append(vals, v)
		}
		switch {
		case name == t.hash.name:
			if p.kind != cCompare || p.op != "=" || typeOf(vals[0]) != t.hash.typ || havePK {
				return kc, validation("Query condition missed key schema element: %s", t.hash.name)
			}
			kc.pk, havePK = keyString(vals[0]), true
		case name == t.rng.name:
			for _, v := range vals {
				if typeOf(v) != t.rng.typ {
					return kc, validation("One or more parameter values were invalid: Condition parameter type does not match schema type")
				}
			}
			switch {
			case p.kind == cCompare && p.op != "<>":
				kc.op, kc.lo = p.op, vals[0]
			case p.kind == cBetween:
				if c, _ := compare(vals[0], vals[1]); c > 0 {
					return kc, validation("Invalid KeyConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound")
				}
				kc.op, kc.lo, kc.hi = "BETWEEN", vals[0], vals[1]
			case p.kind == cFunc && p.op == "begins_with":
				kc.op, kc.lo = "begins_with", vals[0]
			default:
				return kc, bad
			}
		default:
			return kc, validation("Query condition missed key schema element")
		}
	}
	if !havePK {
		return kc, validation("Query condition missed key schema element: %s", t.hash.name)
	}
	return kc, nil
}

func (kc keyCond) match(rk types.AttributeValue) bool {
	if kc.op == "" {
		return true
	}
	if kc.op == "begins_with" {
		ok, _ := (&evalEnv{}).function("begins_with", []types.AttributeValue{rk, kc.lo})
		return ok
	}
	c, _ := compare(rk, kc.lo)
	switch kc.op {
	case "=":
		return c == 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	h, _ := compare(rk, kc.hi)
	return c >= 0 && h <= 0
}

// Query reads a partition key's items in sort-key order (or reverse),
// after ExclusiveStartKey, up to Limit items or 1 MB read, then filters
// and projects them. It charges the items read, before the filter.
func (db *DB) Query(ctx context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	var out *dynamodb.QueryOutput
	err := db.call(ctx, "Query", func(now time.Time, c *callCount) error {
		t, err := db.table(aws.ToString(in.TableName))
		if err != nil {
			return err
		}
		c.table = t.name
		if in.IndexName != nil {
			return validation("The model has no secondary indexes")
		}
		if in.KeyConditionExpression == nil {
			return validation("KeyConditionExpression is required")
		}
		ps, env, err := exprs(in.ExpressionAttributeNames, in.ExpressionAttributeValues,
			exprArg{kindCond, in.KeyConditionExpression}, exprArg{kindCond, in.FilterExpression}, exprArg{kindProj, in.ProjectionExpression})
		if err != nil {
			return err
		}
		kc, err := db.keyCondition(t, ps[0].cond, env)
		if err != nil {
			return err
		}
		limit := int(aws.ToInt32(in.Limit))
		if in.Limit != nil && limit < 1 {
			return validation("Limit must be at least 1")
		}
		p := t.part(kc.pk)
		if !db.admitRead(p, now) {
			c.throttled = true
			return throttled(t, false)
		}
		forward := in.ScanIndexForward == nil || *in.ScanIndexForward
		idx := make([]int, 0, len(p.entries))
		for i := range p.entries {
			idx = append(idx, i)
		}
		if !forward {
			slices.Reverse(idx)
		}
		if start := in.ExclusiveStartKey; start != nil {
			spk, srk, err := t.key(start)
			if err != nil || spk != kc.pk {
				return validation("The provided starting key is invalid")
			}
			idx = slices.DeleteFunc(idx, func(i int) bool {
				c, _ := compare(p.entries[i].rk, srk)
				return forward && c <= 0 || !forward && c >= 0
			})
		}
		out = &dynamodb.QueryOutput{}
		read, scanned := 0, 0
		var last Item
		for n, i := range idx {
			e := p.entries[i]
			if !kc.match(e.rk) {
				continue
			}
			size := ItemSize(e.item)
			read += size
			scanned++
			last = e.item
			keep := true
			if ps[1] != nil {
				if keep, err = env.cond(e.item, ps[1].cond); err != nil {
					return err
				}
			}
			if keep {
				out.Count++
				if in.Select != types.SelectCount {
					it := e.item
					if ps[2] != nil {
						if it, err = env.project(it, ps[2].proj); err != nil {
							return err
						}
					}
					out.Items = append(out.Items, it)
				}
			}
			// DynamoDB stops at Limit items evaluated, with their last key
			// to start from (whether or not more follow), and at 1 MB read.
			if limit > 0 && scanned == limit || read >= maxQueryBytes && n < len(idx)-1 {
				out.LastEvaluatedKey = t.keyItem(last)
				break
			}
		}
		out.ScannedCount = int32(scanned)
		u := ReadUnits(read, aws.ToBool(in.ConsistentRead), false)
		p.r.pay(u)
		c.charge(t.name, u)
		out.ConsumedCapacity = consumed(in.ReturnConsumedCapacity, t.name, u, false)
		return nil
	})
	return out, err
}

// keyItem is an item's primary key.
func (t *table) keyItem(it Item) Item {
	k := Item{t.hash.name: it[t.hash.name]}
	if t.rng.name != "" {
		k[t.rng.name] = it[t.rng.name]
	}
	return k
}

// BatchGetItem reads up to 100 items, each as a GetItem of its own; keys
// whose partition key is over its read capacity come back unprocessed
// (all of them: ProvisionedThroughputExceeded).
func (db *DB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	var out *dynamodb.BatchGetItemOutput
	err := db.call(ctx, "BatchGetItem", func(now time.Time, c *callCount) error {
		total := 0
		tables := slices.Sorted(maps.Keys(in.RequestItems))
		for _, name := range tables {
			total += len(in.RequestItems[name].Keys)
		}
		if total == 0 || total > 100 {
			return validation("Too many items requested for the BatchGetItem call")
		}
		out = &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}}
		processed := 0
		for _, name := range tables {
			ka := in.RequestItems[name]
			t, err := db.table(name)
			if err != nil {
				return err
			}
			if c.table == "" {
				c.table = t.name
			}
			ps, env, err := exprs(ka.ExpressionAttributeNames, nil, exprArg{kindProj, ka.ProjectionExpression})
			if err != nil {
				return err
			}
			seen := map[string]bool{}
			units := 0.0
			for _, k := range ka.Keys {
				pk, rk, err := t.key(k)
				if err != nil {
					return err
				}
				id := pk + "\x00" + keyString(rk)
				if seen[id] {
					return validation("Provided list of item keys contains duplicates")
				}
				seen[id] = true
				p := t.part(pk)
				if !db.admitRead(p, now) {
					un := out.UnprocessedKeys[name]
					un.Keys = append(un.Keys, k)
					un.ConsistentRead, un.ProjectionExpression, un.ExpressionAttributeNames = ka.ConsistentRead, ka.ProjectionExpression, ka.ExpressionAttributeNames
					if out.UnprocessedKeys == nil {
						out.UnprocessedKeys = map[string]types.KeysAndAttributes{}
					}
					out.UnprocessedKeys[name] = un
					continue
				}
				processed++
				it := t.get(pk, rk)
				u := ReadUnits(ItemSize(it), aws.ToBool(ka.ConsistentRead), false)
				p.r.pay(u)
				units += u
				if it == nil {
					continue
				}
				if ps[0] != nil {
					if it, err = env.project(it, ps[0].proj); err != nil {
						return err
					}
				}
				out.Responses[name] = append(out.Responses[name], it)
			}
			c.charge(t.name, units)
			if cc := consumed(in.ReturnConsumedCapacity, t.name, units, false); cc != nil {
				out.ConsumedCapacity = append(out.ConsumedCapacity, *cc)
			}
		}
		if processed == 0 {
			c.throttled = true
			return throttled(db.tables[tables[0]], false)
		}
		c.throttled = len(out.UnprocessedKeys) > 0
		return nil
	})
	return out, err
}

// BatchWriteItem puts and deletes up to 25 items, each as a write of its
// own, without conditions; requests whose partition key is over its write
// capacity come back unprocessed (all of them:
// ProvisionedThroughputExceeded).
func (db *DB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	var out *dynamodb.BatchWriteItemOutput
	err := db.call(ctx, "BatchWriteItem", func(now time.Time, c *callCount) error {
		tables := slices.Sorted(maps.Keys(in.RequestItems))
		total := 0
		for _, name := range tables {
			total += len(in.RequestItems[name])
		}
		if total == 0 || total > 25 {
			return validation("Too many items requested for the BatchWriteItem call")
		}
		// Validate everything before writing anything.
		var ws []*write
		seen := map[string]bool{}
		for _, name := range tables {
			for _, r := range in.RequestItems[name] {
				var w *write
				var err error
				switch {
				case r.PutRequest != nil && r.DeleteRequest == nil:
					w, err = db.newWrite("Put", aws.String(name), r.PutRequest.Item, nil, nil, nil, nil)
				case r.DeleteRequest != nil && r.PutRequest == nil:
					w, err = db.newWrite("Delete", aws.String(name), r.DeleteRequest.Key, nil, nil, nil, nil)
				default:
					err = validation("Supplied AttributeValue has more than one datatypes set, must contain exactly one of the supported datatypes")
				}
				if err != nil {
					return err
				}
				id := name + "\x00" + w.pk + "\x00" + keyString(w.rk)
				if seen[id] {
					return validation("Provided list of item keys contains duplicates")
				}
				seen[id] = true
				ws = append(ws, w)
			}
		}
		c.table = tables[0]
		out = &dynamodb.BatchWriteItemOutput{}
		units := map[string]float64{}
		processed := 0
		for i, w := range ws {
			if _, err := w.prepare(false); err != nil {
				return err
			}
			if !db.takeWrite(w.t.part(w.pk), now, w.units) {
				if out.UnprocessedItems == nil {
					out.UnprocessedItems = map[string][]types.WriteRequest{}
				}
				out.UnprocessedItems[w.t.name] = append(out.UnprocessedItems[w.t.name], requestOf(in, ws, i))
				continue
			}
			processed++
			units[w.t.name] += w.units
			c.charge(w.t.name, w.units)
			db.put(w.t, w.pk, w.rk, w.new, now)
		}
		if processed == 0 {
			c.throttled = true
			out = nil
			return throttled(ws[0].t, true)
		}
		c.throttled = len(out.UnprocessedItems) > 0
		for _, name := range tables {
			if cc := consumed(in.ReturnConsumedCapacity, name, units[name], true); cc != nil {
				out.ConsumedCapacity = append(out.ConsumedCapacity, *cc)
			}
		}
		return nil
	})
	return out, err
}

// requestOf returns the i-th request of the batch, in the order ws was
// built (tables sorted, requests in order).
func requestOf(in *dynamodb.BatchWriteItemInput, ws []*write, i int) types.WriteRequest {
	n := 0
	for _, name := range slices.Sorted(maps.Keys(in.RequestItems)) {
		for _, r := range in.RequestItems[name] {
			if n == i {
				return r
			}
			n++
		}
	}
	return types.WriteRequest{}
}

// TransactWriteItems writes up to 100 items atomically: every partition
// key must have the capacity for its items (at twice the units), then
// every condition must hold; otherwise nothing is written and the
// TransactionCanceledException gives a reason per item. A
// ClientRequestToken of a transaction that committed makes a resend a
// success that writes nothing (for ten minutes on DynamoDB; the model
// keeps them for its life).
func (db *DB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var out *dynamodb.TransactWriteItemsOutput
	err := db.call(ctx, "TransactWriteItems", func(now time.Time, c *callCount) error {
		n := len(in.TransactItems)
		if n == 0 || n > 100 {
			return validation("Member must have length less than or equal to 100 and at least 1")
		}
		token := aws.ToString(in.ClientRequestToken)
		ws := make([]*write, n)
		returnOld := make([]bool, n)
		seen := map[string]bool{}
		for i, it := range in.TransactItems {
			var w *write
			var err error
			set := 0
			if p := it.Put; p != nil {
				set++
				w, err = db.newWrite("Put", p.TableName, p.Item, nil, p.ConditionExpression, p.ExpressionAttributeNames, p.ExpressionAttributeValues)
				returnOld[i] = p.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld
			}
			if u := it.Update; u != nil {
				set++
				w, err = db.newWrite("Update", u.TableName, u.Key, u.UpdateExpression, u.ConditionExpression, u.ExpressionAttributeNames, u.ExpressionAttributeValues)
				returnOld[i] = u.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld
			}
			if d := it.Delete; d != nil {
				set++
				w, err = db.newWrite("Delete", d.TableName, d.Key, nil, d.ConditionExpression, d.ExpressionAttributeNames, d.ExpressionAttributeValues)
				returnOld[i] = d.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld
			}
			if cc := it.ConditionCheck; cc != nil {
				set++
				w, err = db.newWrite("ConditionCheck", cc.TableName, cc.Key, nil, cc.ConditionExpression, cc.ExpressionAttributeNames, cc.ExpressionAttributeValues)
				returnOld[i] = cc.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld
			}
			if set != 1 && err == nil {
				err = validation("TransactItems can only contain one of Check, Put, Update or Delete")
			}
			if err != nil {
				return err
			}
			id := w.t.name + "\x00" + w.pk + "\x00" + keyString(w.rk)
			if seen[id] {
				return validation("Transaction request cannot include multiple operations on one item")
			}
			seen[id] = true
			ws[i] = w
			if c.table == "" {
				c.table = w.t.name
			}
		}
		if token != "" && db.tokens[token] {
			// A resend of a committed transaction writes nothing; it reads
			// each item transactionally, and reports those read units.
			out = &dynamodb.TransactWriteItemsOutput{}
			units := map[string]float64{}
			for _, w := range ws {
				u := ReadUnits(ItemSize(w.t.get(w.pk, w.rk)), true, true)
				units[w.t.name] += u
				c.charge(w.t.name, u)
			}
			for _, name := range slices.Sorted(maps.Keys(units)) {
				if cc := consumed(in.ReturnConsumedCapacity, name, units[name], false); cc != nil {
					out.ConsumedCapacity = append(out.ConsumedCapacity, *cc)
				}
			}
			return nil
		}
		reasons := make([]types.CancellationReason, n)
		conds := make([]bool, n)
		for i, w := range ws {
			ok, err := w.prepare(true)
			if err != nil {
				return err
			}
			conds[i] = ok
			reasons[i].Code = aws.String(reasonNone)
		}
		// Capacity first: a key without the units for its items refuses
		// them all (nothing is taken from any key then).
		cost := map[*partition]float64{}
		for _, w := range ws {
			cost[w.t.part(w.pk)] += w.units
		}
		short := map[*partition]bool{}
		for p, u := range cost {
			rate, burst := db.wrate()
			if rate >= 0 {
				p.w.refill(now, rate, burst)
				if p.w.tokens < u {
					short[p] = true
				}
			}
		}
		if len(short) > 0 {
			for i, w := range ws {
				if short[w.t.part(w.pk)] {
					reasons[i] = types.CancellationReason{Code: aws.String(reasonThrottling),
						Message: aws.String("Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table or index so please try again shortly.")}
				}
			}
			c.throttled = true
			return cancelled(reasons)
		}
		units := map[string]float64{}
		for p, u := range cost {
			p.w.tokens -= u
		}
		for _, w := range ws {
			units[w.t.name] += w.units
			c.charge(w.t.name, w.units)
		}
		failed := false
		for i, ok := range conds {
			if !ok {
				failed = true
				reasons[i] = types.CancellationReason{Code: aws.String(reasonCondition), Message: aws.String("The conditional request failed")}
				if returnOld[i] && ws[i].old != nil {
					reasons[i].Item = ws[i].old
				}
			}
		}
		if failed {
			return cancelled(reasons)
		}
		for _, w := range ws {
			if w.kind != "ConditionCheck" {
				db.put(w.t, w.pk, w.rk, w.new, now)
			}
		}
		if token != "" {
			db.tokens[token] = true
		}
		out = &dynamodb.TransactWriteItemsOutput{}
		for _, name := range slices.Sorted(maps.Keys(units)) {
			if cc := consumed(in.ReturnConsumedCapacity, name, units[name], true); cc != nil {
				out.ConsumedCapacity = append(out.ConsumedCapacity, *cc)
			}
		}
		return nil
	})
	return out, err
}

// Items returns a table's items, in key order (for tests and checks; no
// latency, no capacity).
func (db *DB) Items(name string) []Item {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, ok := db.tables[name]
	if !ok {
		return nil
	}
	keys := slices.Collect(maps.Keys(t.parts))
	sort.Strings(keys)
	var out []Item
	for _, k := range keys {
		for _, e := range t.parts[k].entries {
			out = append(out, e.item)
		}
	}
	return out
}
