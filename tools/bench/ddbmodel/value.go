package ddbmodel

import (
	"bytes"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Item is a stored item. Stored items are never changed in place: a write
// stores a new map (copied along the paths it changes), so a reader may
// hold one without a lock.
type Item = map[string]types.AttributeValue

// ItemSize is an item's size by DynamoDB's rules ("Item sizes and
// formats"): each attribute's name in UTF-8 bytes plus its value's size.
// store/dynamo has its own (unexported) count for the writer's 400 KB
// check; the model keeps one of its own on purpose, so that it does not
// agree with the code under test by construction.
func ItemSize(it Item) int {
	n := 0
	for name, v := range it {
		n += len(name) + valueSize(v)
	}
	return n
}

// valueSize is a value's size: strings and binaries their length, a number
// one byte per two significant digits plus one, a boolean or null one
// byte, a set its elements, a list or map 3 bytes plus one per element
// (and a map's keys) plus the elements' sizes.
func valueSize(v types.AttributeValue) int {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value)
	case *types.AttributeValueMemberB:
		return len(x.Value)
	case *types.AttributeValueMemberN:
		return numberSize(x.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range x.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range x.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range x.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range x.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

// numberSize: one byte per two significant digits, plus one.
func numberSize(s string) int {
	mant, _, _ := strings.Cut(strings.ToLower(s), "e")
	mant = strings.TrimLeft(mant, "+-")
	digits := strings.Trim(strings.Replace(mant, ".", "", 1), "0")
	return (len(digits)+1)/2 + 1
}

// typeOf is a value's DynamoDB type token ("S", "N", ...).
func typeOf(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	case *types.AttributeValueMemberB:
		return "B"
	case *types.AttributeValueMemberBOOL:
		return "BOOL"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberSS:
		return "SS"
	case *types.AttributeValueMemberNS:
		return "NS"
	case *types.AttributeValueMemberBS:
		return "BS"
	case *types.AttributeValueMemberL:
		return "L"
	case *types.AttributeValueMemberM:
		return "M"
	}
	return ""
}

// compare orders two scalars of the same type (N numerically, S and B by
// bytes); ok is false for other types or a type mismatch.
func compare(a, b types.AttributeValue) (c int, ok bool) {
	switch x := a.(type) {
	case *types.AttributeValueMemberN:
		if y, is := b.(*types.AttributeValueMemberN); is {
			return cmpNumber(x.Value, y.Value), true
		}
	case *types.AttributeValueMemberS:
		if y, is := b.(*types.AttributeValueMemberS); is {
			return strings.Compare(x.Value, y.Value), true
		}
	case *types.AttributeValueMemberB:
		if y, is := b.(*types.AttributeValueMemberB); is {
			return bytes.Compare(x.Value, y.Value), true
		}
	}
	return 0, false
}

// equal is DynamoDB's equality: same type and value; numbers by value,
// sets whatever their order.
func equal(a, b types.AttributeValue) bool {
	if a == nil || b == nil {
		return false
	}
	if c, ok := compare(a, b); ok {
		return c == 0
	}
	switch x := a.(type) {
	case *types.AttributeValueMemberBOOL:
		y, ok := b.(*types.AttributeValueMemberBOOL)
		return ok && x.Value == y.Value
	case *types.AttributeValueMemberNULL:
		_, ok := b.(*types.AttributeValueMemberNULL)
		return ok
	case *types.AttributeValueMemberSS:
		y, ok := b.(*types.AttributeValueMemberSS)
		return ok && sameSet(x.Value, y.Value, func(p, q string) bool { return p == q })
	case *types.AttributeValueMemberNS:
		y, ok := b.(*types.AttributeValueMemberNS)
		return ok && sameSet(x.Value, y.Value, func(p, q string) bool { return cmpNumber(p, q) == 0 })
	case *types.AttributeValueMemberBS:
		y, ok := b.(*types.AttributeValueMemberBS)
		return ok && sameSet(x.Value, y.Value, bytes.Equal)
	case *types.AttributeValueMemberL:
		y, ok := b.(*types.AttributeValueMemberL)
		if !ok || len(x.Value) != len(y.Value) {
			return false
		}
		for i := range x.Value {
			if !equal(x.Value[i], y.Value[i]) {
				return false
			}
		}
		return true
	case *types.AttributeValueMemberM:
		y, ok := b.(*types.AttributeValueMemberM)
		return ok && equalItems(x.Value, y.Value)
	}
	return false
}

func equalItems(a, b Item) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !equal(v, w) {
			return false
		}
	}
	return true
}

func sameSet[T any](a, b []T, eq func(T, T) bool) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y T) bool { return eq(x, y) }) {
			return false
		}
	}
	return true
}

// decimal is a DynamoDB number parsed: sign, significant digits and the
// power of ten of the last digit (value = sign × digits × 10^exp).
type decimal struct {
	neg    bool
	digits string // no leading zeros; "" for zero
	exp    int
}

func parseDecimal(s string) (decimal, error) {
	var d decimal
	in := s
	if s == "" {
		return d, fmt.Errorf("empty number")
	}
	switch s[0] {
	case '-':
		d.neg, s = true, s[1:]
	case '+':
		s = s[1:]
	}
	mant, e, hasExp := strings.Cut(strings.ToLower(s), "e")
	if hasExp {
		n, err := strconv.Atoi(e)
		if err != nil {
			return d, fmt.Errorf("number %q: bad exponent", in)
		}
		d.exp = n
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" && frac == "" {
		return d, fmt.Errorf("number %q: no digits", in)
	}
	for _, c := range intPart + frac {
		if c < '0' || c > '9' {
			return d, fmt.Errorf("number %q: not a number", in)
		}
	}
	d.exp -= len(frac)
	digits := strings.TrimLeft(intPart+frac, "0")
	trimmed := strings.TrimRight(digits, "0")
	d.exp += len(digits) - len(trimmed)
	d.digits = trimmed
	if d.digits == "" {
		d.neg, d.exp = false, 0
	}
	if len(d.digits) > 38 {
		return d, fmt.Errorf("number %q: more than 38 significant digits", in)
	}
	return d, nil
}

// cmpNumber compares two numbers by value; an unparseable one sorts as
// its string (the model stores only numbers it validated).
func cmpNumber(a, b string) int {
	if a == b {
		return 0
	}
	x, err1 := parseDecimal(a)
	y, err2 := parseDecimal(b)
	if err1 != nil || err2 != nil {
		return strings.Compare(a, b)
	}
	return cmpDecimal(x, y)
}

func cmpDecimal(x, y decimal) int {
	sign := func(d decimal) int {
		switch {
		case d.digits == "":
			return 0
		case d.neg:
			return -1
		}
		return 1
	}
	sx, sy := sign(x), sign(y)
	if sx != sy || sx == 0 {
		return compareInts(sx, sy)
	}
	// Same sign: compare magnitudes, by the position of the leading digit
	// first.
	mx, my := len(x.digits)+x.exp, len(y.digits)+y.exp
	c := 0
	if mx != my {
		c = compareInts(mx, my)
	} else {
		n := max(len(x.digits), len(y.digits))
		c = strings.Compare(x.digits+strings.Repeat("0", n-len(x.digits)), y.digits+strings.Repeat("0", n-len(y.digits)))
	}
	return c * sx
}

func compareInts(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// addNumbers returns a+b (or a-b) as DynamoDB writes it: no exponent, no
// trailing fraction zeros.
func addNumbers(a, b string, subtract bool) (string, error) {
	x, err := parseDecimal(a)
	if err != nil {
		return "", err
	}
	y, err := parseDecimal(b)
	if err != nil {
		return "", err
	}
	rx, ry := x.rat(), y.rat()
	if subtract {
		ry.Neg(ry)
	}
	sum := new(big.Rat).Add(rx, ry)
	out := formatRat(sum)
	if _, err := parseDecimal(out); err != nil {
		return "", err
	}
	return out, nil
}

func (d decimal) rat() *big.Rat {
	n, _ := new(big.Int).SetString(cmpOr(d.digits, "0"), 10)
	r := new(big.Rat).SetInt(n)
	if d.exp != 0 {
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(absInt(d.exp))), nil)
		if d.exp > 0 {
			r.Mul(r, new(big.Rat).SetInt(p))
		} else {
			r.Quo(r, new(big.Rat).SetInt(p))
		}
	}
	if d.neg {
		r.Neg(r)
	}
	return r
}

func formatRat(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	// A sum of decimals is a decimal: its denominator divides a power of
	// ten of at most 38+38 digits.
	s := r.FloatString(80)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func absInt(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// validValue checks what DynamoDB checks of a value written: numbers
// parse, strings are UTF-8, sets are non-empty and without duplicates,
// and an empty set is refused.
func validValue(v types.AttributeValue) error {
	switch x := v.(type) {
	case nil:
		return fmt.Errorf("a value with no type")
	case *types.AttributeValueMemberN:
		_, err := parseDecimal(x.Value)
		return err
	case *types.AttributeValueMemberS:
		if !utf8.ValidString(x.Value) {
			return fmt.Errorf("a string that is not UTF-8")
		}
	case *types.AttributeValueMemberNS:
		if len(x.Value) == 0 {
			return fmt.Errorf("an empty number set")
		}
		for _, n := range x.Value {
			if _, err := parseDecimal(n); err != nil {
				return err
			}
		}
	case *types.AttributeValueMemberSS:
		if len(x.Value) == 0 {
			return fmt.Errorf("an empty string set")
		}
	case *types.AttributeValueMemberBS:
		if len(x.Value) == 0 {
			return fmt.Errorf("an empty binary set")
		}
	case *types.AttributeValueMemberL:
		for _, e := range x.Value {
			if err := validValue(e); err != nil {
				return err
			}
		}
	case *types.AttributeValueMemberM:
		for _, e := range x.Value {
			if err := validValue(e); err != nil {
				return err
			}
		}
	}
	return nil
}
