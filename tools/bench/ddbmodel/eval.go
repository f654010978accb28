package ddbmodel

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// evalEnv evaluates parsed expressions with one call's placeholders.
type evalEnv struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

func (e *evalEnv) name(el pathElem) (string, error) {
	if !strings.HasPrefix(el.name, "#") {
		return el.name, nil
	}
	n, ok := e.names[el.name]
	if !ok {
		return "", validation("An expression attribute name used in the document path is not defined; attribute name: %s", el.name)
	}
	return n, nil
}

func (e *evalEnv) value(ph string) (types.AttributeValue, error) {
	v, ok := e.values[ph]
	if !ok {
		return nil, validation("An expression attribute value used in expression is not defined; attribute value: %s", ph)
	}
	return v, nil
}

// get reads the value at p in item (nil when there is none).
func (e *evalEnv) get(item Item, p path) (types.AttributeValue, error) {
	var cur types.AttributeValue
	for i, el := range p {
		if el.isIdx {
			l, ok := cur.(*types.AttributeValueMemberL)
			if !ok || el.index >= len(l.Value) {
				return nil, nil
			}
			cur = l.Value[el.index]
			continue
		}
		n, err := e.name(el)
		if err != nil {
			return nil, err
		}
		var m Item
		if i == 0 {
			m = item
		} else if mm, ok := cur.(*types.AttributeValueMemberM); ok {
			m = mm.Value
		} else {
			return nil, nil
		}
		v, ok := m[n]
		if !ok {
			return nil, nil
		}
		cur = v
	}
	return cur, nil
}

func (e *evalEnv) operand(item Item, o operand) (types.AttributeValue, error) {
	switch o.kind {
	case opValue:
		return e.value(o.value)
	case opPath:
		return e.get(item, o.path)
	case opSize:
		v, err := e.get(item, o.path)
		if err != nil || v == nil {
			return nil, err
		}
		n := -1
		switch x := v.(type) {
		case *types.AttributeValueMemberS:
			n = len(x.Value)
		case *types.AttributeValueMemberB:
			n = len(x.Value)
		case *types.AttributeValueMemberSS:
			n = len(x.Value)
		case *types.AttributeValueMemberNS:
			n = len(x.Value)
		case *types.AttributeValueMemberBS:
			n = len(x.Value)
		case *types.AttributeValueMemberL:
			n = len(x.Value)
		case *types.AttributeValueMemberM:
			n = len(x.Value)
		}
		if n < 0 {
			return nil, nil
		}
		return &types.AttributeValueMemberN{Value: strconv.Itoa(n)}, nil
	case opIfNotExists:
		v, err := e.get(item, o.path)
		if err != nil || v != nil {
			return v, err
		}
		return e.operand(item, o.args[0])
	case opListAppend:
		a, b, err := e.operands(item, o.args)
		if err != nil {
			return nil, err
		}
		la, ok1 := a.(*types.AttributeValueMemberL)
		lb, ok2 := b.(*types.AttributeValueMemberL)
		if !ok1 || !ok2 {
			return nil, validation("An operand in the update expression has an incorrect data type")
		}
		return &types.AttributeValueMemberL{Value: append(slices.Clone(la.Value), lb.Value...)}, nil
	case opArith:
		a, b, err := e.operands(item, o.args)
		if err != nil {
			return nil, err
		}
		na, ok1 := a.(*types.AttributeValueMemberN)
		nb, ok2 := b.(*types.AttributeValueMemberN)
		if !ok1 || !ok2 {
			return nil, validation("An operand in the update expression has an incorrect data type")
		}
		s, err := addNumbers(na.Value, nb.Value, o.arith == '-')
		if err != nil {
			return nil, validation("%v", err)
		}
		return &types.AttributeValueMemberN{Value: s}, nil
	}
	return nil, fmt.Errorf("ddbmodel: operand kind %d", o.kind)
}

// operands evaluates a pair of operands.
func (e *evalEnv) operands(item Item, pair []operand) (a, b types.AttributeValue, err error) {
	if a, err = e.operand(item, pair[0]); err != nil {
		return nil, nil, err
	}
	b, err = e.operand(item, pair[1])
	return a, b, err
}

// cond evaluates c on item (nil item: no item, every path missing).
func (e *evalEnv) cond(item Item, c *cond) (bool, error) {
	switch c.kind {
	case cAnd, cOr:
		l, err := e.cond(item, c.children[0])
		if err != nil {
			return false, err
		}
		// Evaluated to the end either way: a missing placeholder is an
		// error whatever the other side gives.
		r, err := e.cond(item, c.children[1])
		if err != nil {
			return false, err
		}
		if c.kind == cAnd {
			return l && r, nil
		}
		return l || r, nil
	case cNot:
		v, err := e.cond(item, c.children[0])
		return !v, err
	}
	args := make([]types.AttributeValue, len(c.args))
	for i, o := range c.args {
		v, err := e.operand(item, o)
		if err != nil {
			return false, err
		}
		args[i] = v
	}
	switch c.kind {
	case cCompare:
		a, b := args[0], args[1]
		switch c.op {
		case "=":
			return equal(a, b), nil
		case "<>":
			return !equal(a, b), nil
		}
		r, ok := compare(a, b)
		if !ok {
			return false, nil
		}
		switch c.op {
		case "<":
			return r < 0, nil
		case "<=":
			return r <= 0, nil
		case ">":
			return r > 0, nil
		default:
			return r >= 0, nil
		}
	case cBetween:
		if c.args[1].kind == opValue && c.args[2].kind == opValue {
			if r, ok := compare(args[1], args[2]); ok && r > 0 {
				return false, validation("Invalid ConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound")
			}
		}
		lo, ok1 := compare(args[0], args[1])
		hi, ok2 := compare(args[0], args[2])
		return ok1 && ok2 && lo >= 0 && hi <= 0, nil
	case cIn:
		for _, v := range args[1:] {
			if equal(args[0], v) {
				return true, nil
			}
		}
		return false, nil
	case cFunc:
		return e.function(c.op, args)
	}
	return false, fmt.Errorf("ddbmodel: condition kind %d", c.kind)
}

func (e *evalEnv) function(name string, args []types.AttributeValue) (bool, error) {
	v := args[0]
	switch name {
	case "attribute_exists":
		return v != nil, nil
	case "attribute_not_exists":
		return v == nil, nil
	case "attribute_type":
		t, ok := args[1].(*types.AttributeValueMemberS)
		if !ok {
			return false, validation("Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: attribute_type")
		}
		return v != nil && typeOf(v) == t.Value, nil
	case "begins_with":
		switch x := v.(type) {
		case *types.AttributeValueMemberS:
			p, ok := args[1].(*types.AttributeValueMemberS)
			return ok && strings.HasPrefix(x.Value, p.Value), nil
		case *types.AttributeValueMemberB:
			p, ok := args[1].(*types.AttributeValueMemberB)
			return ok && bytes.HasPrefix(x.Value, p.Value), nil
		}
		return false, nil
	case "contains":
		switch x := v.(type) {
		case *types.AttributeValueMemberS:
			p, ok := args[1].(*types.AttributeValueMemberS)
			return ok && strings.Contains(x.Value, p.Value), nil
		case *types.AttributeValueMemberB:
			p, ok := args[1].(*types.AttributeValueMemberB)
			return ok && bytes.Contains(x.Value, p.Value), nil
		case *types.AttributeValueMemberSS:
			p, ok := args[1].(*types.AttributeValueMemberS)
			return ok && slices.Contains(x.Value, p.Value), nil
		case *types.AttributeValueMemberNS:
			p, ok := args[1].(*types.AttributeValueMemberN)
			return ok && slices.ContainsFunc(x.Value, func(n string) bool { return cmpNumber(n, p.Value) == 0 }), nil
		case *types.AttributeValueMemberBS:
			p, ok := args[1].(*types.AttributeValueMemberB)
			return ok && slices.ContainsFunc(x.Value, func(b []byte) bool { return bytes.Equal(b, p.Value) }), nil
		case *types.AttributeValueMemberL:
			return slices.ContainsFunc(x.Value, func(el types.AttributeValue) bool { return equal(el, args[1]) }), nil
		}
		return false, nil
	}
	return false, fmt.Errorf("ddbmodel: function %s", name)
}

// apply returns the item that u makes of old (nil: no item yet); every
// value is computed from old, then the actions are applied in order.
func (e *evalEnv) apply(old Item, u *update) (Item, error) {
	type write struct {
		path path
		v    types.AttributeValue // nil: remove
	}
	var writes []write
	for _, s := range u.sets {
		v, err := e.operand(old, s.value)
		if err != nil {
			return nil, err
		}
		if v == nil {
			return nil, validation("The provided expression refers to an attribute that does not exist in the item")
		}
		writes = append(writes, write{s.path, v})
	}
	for _, p := range u.removes {
		writes = append(writes, write{path: p})
	}
	for _, group := range []struct {
		actions []setAction
		op      func(cur, v types.AttributeValue) (types.AttributeValue, error)
	}{{u.adds, addValue}, {u.deletes, deleteFromSet}} {
		for _, a := range group.actions {
			cur, err := e.get(old, a.path)
			if err != nil {
				return nil, err
			}
			v, err := e.operand(old, a.value)
			if err != nil {
				return nil, err
			}
			nv, err := group.op(cur, v)
			if err != nil {
				return nil, err
			}
			writes = append(writes, write{a.path, nv})
		}
	}
	// Two actions on one path, or on a path and one inside it, are
	// refused (DynamoDB: "Two document paths overlap").
	keys := make([]string, len(writes))
	for i, w := range writes {
		k, err := e.pathKey(w.path)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	for i := range keys {
		for j := range i {
			if overlap(keys[i], keys[j]) {
				return nil, validation("Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of these paths")
			}
		}
	}
	item := maps.Clone(old)
	if item == nil {
		item = Item{}
	}
	for _, w := range writes {
		var err error
		if item, err = e.setPath(item, w.path, w.v); err != nil {
			return nil, err
		}
	}
	return item, nil
}

// pathKey writes a path with its names resolved, for the overlap check.
func (e *evalEnv) pathKey(p path) (string, error) {
	var b strings.Builder
	for _, el := range p {
		if el.isIdx {
			fmt.Fprintf(&b, "[%d]", el.index)
			continue
		}
		n, err := e.name(el)
		if err != nil {
			return "", err
		}
		b.WriteString("." + n)
	}
	return b.String(), nil
}

func overlap(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return strings.HasPrefix(b, a) && (len(a) == len(b) || b[len(a)] == '.' || b[len(a)] == '[')
}

// addValue is ADD: a number added to a number (or set where there was
// none), a set's elements added to a set of its type.
func addValue(cur, v types.AttributeValue) (types.AttributeValue, error) {
	if x, ok := v.(*types.AttributeValueMemberN); ok {
		if cur == nil {
			return x, nil
		}
		c, ok := cur.(*types.AttributeValueMemberN)
		if !ok {
			return nil, validation("An operand in the update expression has an incorrect data type")
		}
		s, err := addNumbers(c.Value, x.Value, false)
		if err != nil {
			return nil, validation("%v", err)
		}
		return &types.AttributeValueMemberN{Value: s}, nil
	}
	if !isSet(v) {
		return nil, validation("Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD, operand type: %s", typeOf(v))
	}
	if cur == nil {
		return v, nil
	}
	out, ok := setOp(cur, v, true)
	if !ok {
		return nil, validation("An operand in the update expression has an incorrect data type")
	}
	return out, nil
}

// deleteFromSet is DELETE: a set's elements taken out of a set of its
// type; an empty set is no attribute.
func deleteFromSet(cur, v types.AttributeValue) (types.AttributeValue, error) {
	if cur == nil {
		return nil, nil
	}
	out, ok := setOp(cur, v, false)
	if !isSet(v) || !ok {
		return nil, validation("Invalid UpdateExpression: Incorrect operand type for operator or function; operator: DELETE")
	}
	return out, nil
}

func isSet(v types.AttributeValue) bool {
	switch v.(type) {
	case *types.AttributeValueMemberSS, *types.AttributeValueMemberNS, *types.AttributeValueMemberBS:
		return true
	}
	return false
}

// setOp adds v's elements to cur's (add) or takes them out; ok is false
// when they are not sets of one type. An emptied set is nil.
func setOp(cur, v types.AttributeValue, add bool) (types.AttributeValue, bool) {
	switch x := v.(type) {
	case *types.AttributeValueMemberSS:
		c, ok := cur.(*types.AttributeValueMemberSS)
		if !ok {
			return nil, false
		}
		return setOf(combine(c.Value, x.Value, func(a, b string) bool { return a == b }, add), func(e []string) types.AttributeValue {
			return &types.AttributeValueMemberSS{Value: e}
		}), true
	case *types.AttributeValueMemberNS:
		c, ok := cur.(*types.AttributeValueMemberNS)
		if !ok {
			return nil, false
		}
		return setOf(combine(c.Value, x.Value, func(a, b string) bool { return cmpNumber(a, b) == 0 }, add), func(e []string) types.AttributeValue {
			return &types.AttributeValueMemberNS{Value: e}
		}), true
	case *types.AttributeValueMemberBS:
		c, ok := cur.(*types.AttributeValueMemberBS)
		if !ok {
			return nil, false
		}
		return setOf(combine(c.Value, x.Value, bytes.Equal, add), func(e [][]byte) types.AttributeValue {
			return &types.AttributeValueMemberBS{Value: e}
		}), true
	}
	return nil, false
}

// combine is a ∪ b (add) or a ∖ b.
func combine[T any](a, b []T, eq func(T, T) bool, add bool) []T {
	if !add {
		return slices.DeleteFunc(slices.Clone(a), func(x T) bool { return slices.ContainsFunc(b, func(y T) bool { return eq(x, y) }) })
	}
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.ContainsFunc(out, func(y T) bool { return eq(x, y) }) {
			out = append(out, x)
		}
	}
	return out
}

func setOf[T any](elems []T, wrap func([]T) types.AttributeValue) types.AttributeValue {
	if len(elems) == 0 {
		return nil
	}
	return wrap(elems)
}

// setPath stores v at p in item (a top-level copy the caller owns),
// copying the maps and lists on the way; v nil removes. A nested path
// needs its parent to exist.
func (e *evalEnv) setPath(item Item, p path, v types.AttributeValue) (Item, error) {
	n, err := e.name(p[0])
	if err != nil {
		return nil, err
	}
	if len(p) == 1 {
		if v == nil {
			delete(item, n)
		} else {
			item[n] = v
		}
		return item, nil
	}
	cur, ok := item[n]
	if !ok {
		if v == nil {
			return item, nil
		}
		return nil, validation("The document path provided in the update expression is invalid for update")
	}
	nv, err := e.setIn(cur, p[1:], v)
	if err != nil {
		return nil, err
	}
	item[n] = nv
	return item, nil
}

func (e *evalEnv) setIn(cur types.AttributeValue, p path, v types.AttributeValue) (types.AttributeValue, error) {
	invalid := validation("The document path provided in the update expression is invalid for update")
	el := p[0]
	if el.isIdx {
		l, ok := cur.(*types.AttributeValueMemberL)
		if !ok {
			return nil, invalid
		}
		list := slices.Clone(l.Value)
		if len(p) == 1 {
			switch {
			case v == nil && el.index < len(list):
				list = slices.Delete(list, el.index, el.index+1)
			case v == nil:
			case el.index < len(list):
				list[el.index] = v
			default:
				list = append(list, v) // past the end: appended
			}
			return &types.AttributeValueMemberL{Value: list}, nil
		}
		if el.index >= len(list) {
			return nil, invalid
		}
		nv, err := e.setIn(list[el.index], p[1:], v)
		if err != nil {
			return nil, err
		}
		list[el.index] = nv
		return &types.AttributeValueMemberL{Value: list}, nil
	}
	m, ok := cur.(*types.AttributeValueMemberM)
	if !ok {
		return nil, invalid
	}
	n, err := e.name(el)
	if err != nil {
		return nil, err
	}
	mm := maps.Clone(m.Value)
	if len(p) == 1 {
		if v == nil {
			delete(mm, n)
		} else {
			mm[n] = v
		}
		return &types.AttributeValueMemberM{Value: mm}, nil
	}
	child, ok := mm[n]
	if !ok {
		return nil, invalid
	}
	nv, err := e.setIn(child, p[1:], v)
	if err != nil {
		return nil, err
	}
	mm[n] = nv
	return &types.AttributeValueMemberM{Value: mm}, nil
}

// project keeps the paths of item; nested paths keep their parents.
func (e *evalEnv) project(item Item, paths []path) (Item, error) {
	out := Item{}
	for _, p := range paths {
		v, err := e.get(item, p)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		if len(p) == 1 {
			n, _ := e.name(p[0])
			out[n] = v
			continue
		}
		if err := e.projectInto(out, p, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// projectInto builds the parents of a nested projected path in out (lists
// keep the projected elements in order, compacted).
func (e *evalEnv) projectInto(out Item, p path, v types.AttributeValue) error {
	n, err := e.name(p[0])
	if err != nil {
		return err
	}
	var build func(cur types.AttributeValue, rest path) types.AttributeValue
	build = func(cur types.AttributeValue, rest path) types.AttributeValue {
		if len(rest) == 0 {
			return v
		}
		el := rest[0]
		if el.isIdx {
			l, _ := cur.(*types.AttributeValueMemberL)
			var list []types.AttributeValue
			if l != nil {
				list = slices.Clone(l.Value)
			}
			return &types.AttributeValueMemberL{Value: append(list, build(nil, rest[1:]))}
		}
		name, _ := e.name(el)
		m, _ := cur.(*types.AttributeValueMemberM)
		mm := Item{}
		if m != nil {
			mm = maps.Clone(m.Value)
		}
		mm[name] = build(mm[name], rest[1:])
		return &types.AttributeValueMemberM{Value: mm}
	}
	out[n] = build(out[n], p[1:])
	return nil
}
