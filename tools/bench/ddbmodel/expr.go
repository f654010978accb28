package ddbmodel

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// The expression language of DynamoDB (developer guide, "Using
// expressions"): condition, filter and key-condition expressions, update
// expressions and projection expressions, parsed once per distinct text
// and evaluated per call with that call's ExpressionAttributeNames and
// ExpressionAttributeValues.

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tNamePH  // #name
	tValuePH // :value
	tInt
	tPunct
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || c == ':':
			j := i + 1
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("syntax error at %d: %q must be followed by a name", i, c)
			}
			k := tNamePH
			if c == ':' {
				k = tValuePH
			}
			out = append(out, token{k, s[i:j], i})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			out = append(out, token{tInt, s[i:j], i})
			i = j
		case isIdent(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			out = append(out, token{tIdent, s[i:j], i})
			i = j
		case c == '<' && i+1 < len(s) && (s[i+1] == '>' || s[i+1] == '='):
			out = append(out, token{tPunct, s[i : i+2], i})
			i += 2
		case c == '>' && i+1 < len(s) && s[i+1] == '=':
			out = append(out, token{tPunct, ">=", i})
			i += 2
		case strings.IndexByte("()[],.=<>+-", c) >= 0:
			out = append(out, token{tPunct, string(c), i})
			i++
		default:
			return nil, fmt.Errorf("syntax error at %d: unexpected %q", i, c)
		}
	}
	return append(out, token{kind: tEOF, pos: len(s)}), nil
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// pathElem is one step of a document path: a name (an identifier or a
// #placeholder) or a list index.
type pathElem struct {
	name  string
	index int
	isIdx bool
}

type path []pathElem

// operand is a value in an expression: a path, a :placeholder, size(path),
// or (in a SET action) if_not_exists, list_append and + / -.
type operand struct {
	kind  operandKind
	path  path
	value string // :placeholder
	args  []operand
	arith byte // '+' or '-'
}

type operandKind int

const (
	opPath operandKind = iota
	opValue
	opSize
	opIfNotExists
	opListAppend
	opArith
)

// cond is a condition: a comparison, BETWEEN, IN, a function, or NOT, AND
// and OR of conditions.
type cond struct {
	kind     condKind
	op       string // comparator, or function name
	args     []operand
	children []*cond
}

type condKind int

const (
	cCompare condKind = iota
	cBetween
	cIn
	cFunc
	cNot
	cAnd
	cOr
)

// update is a parsed update expression.
type update struct {
	sets    []setAction
	removes []path
	adds    []setAction
	deletes []setAction
}

type setAction struct {
	path  path
	value operand
}

// parsed is any parsed expression with the placeholders it uses.
type parsed struct {
	cond   *cond
	update *update
	proj   []path
	names  []string
	values []string
	err    error
}

type exprKind byte

const (
	kindCond   exprKind = 'c'
	kindUpdate exprKind = 'u'
	kindProj   exprKind = 'p'
)

type cacheKey struct {
	kind exprKind
	text string
}

var cache sync.Map // cacheKey -> *parsed

// parse returns the parsed expression (cached by kind and text).
func parse(kind exprKind, text string) (*parsed, error) {
	key := cacheKey{kind, text}
	if p, ok := cache.Load(key); ok {
		return p.(*parsed), p.(*parsed).err
	}
	p := &parsed{}
	toks, err := lex(text)
	if err == nil {
		ps := &parser{toks: toks, out: p}
		switch kind {
		case kindCond:
			p.cond, err = ps.condition()
		case kindUpdate:
			p.update, err = ps.updateExpr()
		case kindProj:
			p.proj, err = ps.projection()
		}
		if err == nil && ps.peek().kind != tEOF {
			err = fmt.Errorf("syntax error at %d: unexpected %q", ps.peek().pos, ps.peek().text)
		}
	}
	if err != nil {
		p.err = fmt.Errorf("invalid expression %q: %w", text, err)
	}
	cache.Store(key, p)
	return p, p.err
}

type parser struct {
	toks []token
	i    int
	out  *parsed
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) isKeyword(word string) bool {
	t := p.peek()
	return t.kind == tIdent && strings.EqualFold(t.text, word)
}

func (p *parser) isPunct(s string) bool {
	t := p.peek()
	return t.kind == tPunct && t.text == s
}

func (p *parser) expect(s string) error {
	if !p.isPunct(s) {
		t := p.peek()
		return fmt.Errorf("syntax error at %d: want %q, got %q", t.pos, s, t.text)
	}
	p.next()
	return nil
}

func (p *parser) condition() (*cond, error) {
	left, err := p.andCond()
	if err != nil {
		return nil, err
	}
	for p.isKeyword("OR") {
		p.next()
		right, err := p.andCond()
		if err != nil {
			return nil, err
		}
		left = &cond{kind: cOr, children: []*cond{left, right}}
	}
	return left, nil
}

func (p *parser) andCond() (*cond, error) {
	left, err := p.notCond()
	if err != nil {
		return nil, err
	}
	for p.isKeyword("AND") {
		p.next()
		right, err := p.notCond()
		if err != nil {
			return nil, err
		}
		left = &cond{kind: cAnd, children: []*cond{left, right}}
	}
	return left, nil
}

func (p *parser) notCond() (*cond, error) {
	if p.isKeyword("NOT") {
		p.next()
		c, err := p.notCond()
		if err != nil {
			return nil, err
		}
		return &cond{kind: cNot, children: []*cond{c}}, nil
	}
	return p.primaryCond()
}

var condFuncs = map[string]int{
	"attribute_exists": 1, "attribute_not_exists": 1, "attribute_type": 2, "begins_with": 2, "contains": 2,
}

func (p *parser) primaryCond() (*cond, error) {
	if p.isPunct("(") {
		p.next()
		c, err := p.condition()
		if err != nil {
			return nil, err
		}
		return c, p.expect(")")
	}
	t := p.peek()
	if t.kind == tIdent {
		if n, ok := condFuncs[t.text]; ok && p.toks[p.i+1].kind == tPunct && p.toks[p.i+1].text == "(" {
			p.next()
			args, err := p.args(n)
			if err != nil {
				return nil, err
			}
			if args[0].kind != opPath {
				return nil, fmt.Errorf("%s: the first argument must be a document path", t.text)
			}
			return &cond{kind: cFunc, op: t.text, args: args}, nil
		}
	}
	left, err := p.operand(false)
	if err != nil {
		return nil, err
	}
	switch {
	case p.isKeyword("BETWEEN"):
		p.next()
		lo, err := p.operand(false)
		if err != nil {
			return nil, err
		}
		if !p.isKeyword("AND") {
			return nil, fmt.Errorf("syntax error at %d: BETWEEN needs AND", p.peek().pos)
		}
		p.next()
		hi, err := p.operand(false)
		if err != nil {
			return nil, err
		}
		return &cond{kind: cBetween, args: []operand{left, lo, hi}}, nil
	case p.isKeyword("IN"):
		p.next()
		if err := p.expect("("); err != nil {
			return nil, err
		}
		args := []operand{left}
		for {
			o, err := p.operand(false)
			if err != nil {
				return nil, err
			}
			args = append(args, o)
			if !p.isPunct(",") {
				break
			}
			p.next()
		}
		if len(args) > 101 {
			return nil, fmt.Errorf("IN takes at most 100 values")
		}
		return &cond{kind: cIn, args: args}, p.expect(")")
	}
	c := p.peek()
	switch c.text {
	case "=", "<>", "<", "<=", ">", ">=":
		if c.kind != tPunct {
			break
		}
		p.next()
		right, err := p.operand(false)
		if err != nil {
			return nil, err
		}
		return &cond{kind: cCompare, op: c.text, args: []operand{left, right}}, nil
	}
	return nil, fmt.Errorf("syntax error at %d: want a comparator, got %q", c.pos, c.text)
}

// args parses n comma-separated operands in parentheses.
func (p *parser) args(n int) ([]operand, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var out []operand
	for i := range n {
		if i > 0 {
			if err := p.expect(","); err != nil {
				return nil, err
			}
		}
		o, err := p.operand(false)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, p.expect(")")
}

// operand parses a path, a value placeholder or size(path); in a SET
// action (set), also if_not_exists, list_append and + / -.
func (p *parser) operand(set bool) (operand, error) {
	left, err := p.simpleOperand(set)
	if err != nil || !set {
		return left, err
	}
	if p.isPunct("+") || p.isPunct("-") {
		op := p.next().text[0]
		right, err := p.simpleOperand(set)
		if err != nil {
			return left, err
		}
		return operand{kind: opArith, arith: op, args: []operand{left, right}}, nil
	}
	return left, nil
}

func (p *parser) simpleOperand(set bool) (operand, error) {
	t := p.peek()
	switch t.kind {
	case tValuePH:
		p.next()
		p.out.values = append(p.out.values, t.text)
		return operand{kind: opValue, value: t.text}, nil
	case tIdent:
		if p.toks[p.i+1].kind == tPunct && p.toks[p.i+1].text == "(" {
			switch {
			case t.text == "size" && !set:
				p.next()
				args, err := p.args(1)
				if err != nil {
					return operand{}, err
				}
				if args[0].kind != opPath {
					return operand{}, fmt.Errorf("size: the argument must be a document path")
				}
				return operand{kind: opSize, path: args[0].path}, nil
			case t.text == "if_not_exists" && set:
				p.next()
				if err := p.expect("("); err != nil {
					return operand{}, err
				}
				pa, err := p.path()
				if err != nil {
					return operand{}, err
				}
				if err := p.expect(","); err != nil {
					return operand{}, err
				}
				v, err := p.operand(true)
				if err != nil {
					return operand{}, err
				}
				return operand{kind: opIfNotExists, path: pa, args: []operand{v}}, p.expect(")")
			case t.text == "list_append" && set:
				p.next()
				if err := p.expect("("); err != nil {
					return operand{}, err
				}
				a, err := p.operand(true)
				if err != nil {
					return operand{}, err
				}
				if err := p.expect(","); err != nil {
					return operand{}, err
				}
				b, err := p.operand(true)
				if err != nil {
					return operand{}, err
				}
				return operand{kind: opListAppend, args: []operand{a, b}}, p.expect(")")
			}
			return operand{}, fmt.Errorf("function %q is not allowed here", t.text)
		}
		fallthrough
	case tNamePH:
		pa, err := p.path()
		return operand{kind: opPath, path: pa}, err
	}
	return operand{}, fmt.Errorf("syntax error at %d: want an operand, got %q", t.pos, t.text)
}

func (p *parser) path() (path, error) {
	var out path
	name := func() error {
		t := p.next()
		switch t.kind {
		case tIdent:
			if isReserved(t.text) {
				return fmt.Errorf("attribute name %q is a reserved keyword; use an expression attribute name", t.text)
			}
		case tNamePH:
			p.out.names = append(p.out.names, t.text)
		default:
			return fmt.Errorf("syntax error at %d: want an attribute name, got %q", t.pos, t.text)
		}
		out = append(out, pathElem{name: t.text})
		return nil
	}
	if err := name(); err != nil {
		return nil, err
	}
	for {
		switch {
		case p.isPunct("."):
			p.next()
			if err := name(); err != nil {
				return nil, err
			}
		case p.isPunct("["):
			p.next()
			t := p.next()
			if t.kind != tInt {
				return nil, fmt.Errorf("syntax error at %d: a list index must be a number", t.pos)
			}
			n, err := strconv.Atoi(t.text)
			if err != nil {
				return nil, err
			}
			out = append(out, pathElem{index: n, isIdx: true})
			if err := p.expect("]"); err != nil {
				return nil, err
			}
		default:
			return out, nil
		}
	}
}

// isReserved refuses the grammar's own keywords as bare names. DynamoDB
// reserves some 570 words; the model does not check the others (the store
// and the SDK's expression builder name every attribute through a
// placeholder).
func isReserved(s string) bool {
	switch strings.ToUpper(s) {
	case "AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE":
		return true
	}
	return false
}

func (p *parser) updateExpr() (*update, error) {
	u := &update{}
	seen := map[string]bool{}
	for p.peek().kind != tEOF {
		t := p.next()
		clause := strings.ToUpper(t.text)
		if t.kind != tIdent || seen[clause] {
			return nil, fmt.Errorf("syntax error at %d: want SET, REMOVE, ADD or DELETE (each at most once), got %q", t.pos, t.text)
		}
		seen[clause] = true
		for {
			pa, err := p.path()
			if err != nil {
				return nil, err
			}
			switch clause {
			case "SET":
				if err := p.expect("="); err != nil {
					return nil, err
				}
				v, err := p.operand(true)
				if err != nil {
					return nil, err
				}
				u.sets = append(u.sets, setAction{pa, v})
			case "REMOVE":
				u.removes = append(u.removes, pa)
			case "ADD", "DELETE":
				v, err := p.simpleOperand(false)
				if err != nil {
					return nil, err
				}
				if v.kind != opValue {
					return nil, fmt.Errorf("%s takes a value placeholder", clause)
				}
				if clause == "ADD" {
					u.adds = append(u.adds, setAction{pa, v})
				} else {
					u.deletes = append(u.deletes, setAction{pa, v})
				}
			default:
				return nil, fmt.Errorf("syntax error at %d: unknown clause %q", t.pos, t.text)
			}
			if !p.isPunct(",") {
				break
			}
			p.next()
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("empty update expression")
	}
	return u, nil
}

func (p *parser) projection() ([]path, error) {
	var out []path
	for {
		pa, err := p.path()
		if err != nil {
			return nil, err
		}
		out = append(out, pa)
		if !p.isPunct(",") {
			return out, nil
		}
		p.next()
	}
}
