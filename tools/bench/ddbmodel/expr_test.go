package ddbmodel

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func show(it Item) string {
	var parts []string
	for k, v := range it {
		parts = append(parts, k+"="+showValue(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func showValue(v types.AttributeValue) string {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return fmt.Sprintf("%q", x.Value)
	case *types.AttributeValueMemberN:
		return x.Value
	case *types.AttributeValueMemberM:
		return "{" + show(x.Value) + "}"
	case *types.AttributeValueMemberL:
		var out []string
		for _, e := range x.Value {
			out = append(out, showValue(e))
		}
		return "[" + strings.Join(out, ",") + "]"
	case *types.AttributeValueMemberSS:
		return fmt.Sprint(x.Value)
	}
	return fmt.Sprintf("%T", v)
}

var exprNames = map[string]string{"#a": "a", "#b": "b", "#m": "m", "#l": "l", "#x": "x", "#n": "n", "#v": "v", "#f": "f", "#o": "o", "#e": "e", "#ss": "ss"}

var exprValues = Item{
	":one": n(1), ":two": n(2), ":ten": n(10), ":s": s("ab"), ":abc": s("abc"), ":fence": s("F"),
	":l": &types.AttributeValueMemberL{Value: []types.AttributeValue{n(9)}}, ":set": &types.AttributeValueMemberSS{Value: []string{"y", "z"}},
	":type": s("N"), ":me": s("me"), ":now": n(100),
}

func exprItem() Item {
	return Item{"a": n(1), "b": n(2), "x": s("abc"), "o": s("me"), "e": n(50),
		"m":  &types.AttributeValueMemberM{Value: Item{"k": s("v"), "n": n(5)}},
		"l":  &types.AttributeValueMemberL{Value: []types.AttributeValue{n(1), n(2), n(3)}},
		"ss": &types.AttributeValueMemberSS{Value: []string{"x", "y"}}}
}

func TestConditions(t *testing.T) {
	tests := []struct {
		expr string
		want bool
	}{
		{"#a = :one", true},
		{"#a <> :one", false},
		{"#a < #b AND #b <= :two", true},
		{"#a > :two OR #b >= :two", true},
		{"NOT #a = :one", false},
		{"NOT (#a = :one OR #b = :one)", false},
		{"#a BETWEEN :one AND :two", true},
		{"#b BETWEEN :one AND :one", false},
		{"#a IN (:two, :ten, :one)", true},
		{"attribute_exists(#m.#n) AND attribute_not_exists(#m.#x)", true},
		{"attribute_not_exists(#f) OR #f <> :fence", true},
		{"#f <> :fence", true}, // a missing attribute is not equal to anything
		{"#f = :fence", false}, // nor equal
		{"#f < :fence", false}, // nor ordered
		{"#x = :one", false},   // a string is not a number
		{"#x <> :one", true},
		{"#x < :one", false},
		{"begins_with(#x, :s)", true},
		{"contains(#x, :s) AND contains(#ss, :fence)", false},
		{"contains(#l, :two)", true},
		{"size(#x) = :two", false},
		{"size(#l) > :two AND size(#m) = :two", true},
		{"attribute_type(#a, :type)", true},
		{"#l[1] = :two AND #m.#n > :one", true},
		{"attribute_not_exists(#o) OR #e <= :now", true},
		{"(#a = :one) AND (attribute_exists (#b))", true}, // the SDK builder's shape
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			p, err := parse(kindCond, tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := (&evalEnv{names: exprNames, values: exprValues}).cond(exprItem(), p.cond)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("%s = %v, want %v", tt.expr, got, tt.want)
			}
		})
	}
}

func TestUpdates(t *testing.T) {
	tests := []struct {
		expr string
		want string // the changed attributes, or the error's start
	}{
		{"SET #a = :ten", "a=10"},
		{"SET #a = #a + :two, #b = #b - :ten", "a=3 b=-8"},
		{"ADD #n :one SET #v = :two", "n=1 v=2"},
		{"ADD #a :ten", "a=11"},
		{"SET #f = if_not_exists(#f, :one), #x = if_not_exists(#a, :ten)", "f=1 x=1"},
		{"SET #l = list_append(#l, :l)", "l=[1,2,3,9]"},
		{"REMOVE #a, #m.#k SET #m.#n = :ten", "a=<gone> m={n=10}"},
		{"REMOVE #l[0]", "l=[2,3]"},
		{"ADD #ss :set", "ss=[x y z]"},
		{"DELETE #ss :set", "ss=[x]"},
		{"SET #a = :one, #a = :two", "ValidationException: Invalid UpdateExpression: Two document paths overlap"},
		{"SET #x = #x + :one", "ValidationException: An operand in the update expression has an incorrect data type"},
		{"SET #f.#x = :one", "ValidationException: The document path provided in the update expression is invalid for update"},
		{"SET #a = :missing", "ValidationException: An expression attribute value used in expression is not defined"},
	}
	names := map[string]string{"#k": "k"}
	for k, v := range exprNames {
		names[k] = v
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			p, err := parse(kindUpdate, tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			old := exprItem()
			got, err := (&evalEnv{names: names, values: exprValues}).apply(old, p.update)
			if err != nil {
				if !strings.HasPrefix(fmt.Sprint(err), "api error "+tt.want) {
					t.Errorf("%s: %v, want %s", tt.expr, err, tt.want)
				}
				return
			}
			var changed []string
			for k := range exprItem() {
				if _, ok := got[k]; !ok {
					changed = append(changed, k+"=<gone>")
				}
			}
			for k, v := range got {
				if w, ok := old[k]; !ok || !equal(v, w) {
					changed = append(changed, k+"="+showValue(v))
				}
			}
			sort.Strings(changed)
			if s := strings.Join(changed, " "); s != tt.want {
				t.Errorf("%s changed %s, want %s", tt.expr, s, tt.want)
			}
			if show(old) != show(exprItem()) {
				t.Errorf("%s changed the old item in place: %s", tt.expr, show(old))
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, e := range []struct {
		kind exprKind
		text string
	}{
		{kindCond, "#a ="}, {kindCond, "#a == :b"}, {kindCond, "size(:v) = :v"}, {kindCond, "#a BETWEEN :a"},
		{kindUpdate, "SET #a = :b SET #c = :d"}, {kindUpdate, "#a = :b"}, {kindUpdate, "ADD #a #b"}, {kindProj, "#a,"},
	} {
		if _, err := parse(e.kind, e.text); err == nil {
			t.Errorf("%q parsed", e.text)
		}
	}
}

func TestNumbers(t *testing.T) {
	for _, tt := range []struct{ a, b, sum string }{
		{"1", "2", "3"}, {"-5", "2", "-3"}, {"0.1", "0.2", "0.3"}, {"1E+2", "1", "101"}, {"99999999999999999999", "1", "100000000000000000000"},
	} {
		got, err := addNumbers(tt.a, tt.b, false)
		if err != nil || got != tt.sum {
			t.Errorf("%s + %s = %s, %v; want %s", tt.a, tt.b, got, err, tt.sum)
		}
	}
	for _, tt := range []struct {
		a, b string
		c    int
	}{{"10", "9", 1}, {"-10", "9", -1}, {"1.50", "1.5", 0}, {"0.001", "0.01", -1}, {"-2", "-10", 1}, {"100", "1E2", 0}, {"0", "-0", 0}} {
		if got := cmpNumber(tt.a, tt.b); got != tt.c {
			t.Errorf("cmp(%s, %s) = %d, want %d", tt.a, tt.b, got, tt.c)
		}
	}
}
