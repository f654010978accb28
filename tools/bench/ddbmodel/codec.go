package ddbmodel

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDB's JSON form of attribute values ({"S": "x"}, {"N": "1"}, ...):
// decoded with encoding/json, written by hand (the relay's Query pages are
// the model's largest answers).

type av struct{ v types.AttributeValue }

type avWire struct {
	S    *string
	N    *string
	B    []byte
	BOOL *bool
	NULL *bool
	SS   []string
	NS   []string
	BS   [][]byte
	L    []av
	M    map[string]av
}

func (a *av) UnmarshalJSON(b []byte) error {
	var w avWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	set := 0
	mark := func(v types.AttributeValue) {
		set++
		a.v = v
	}
	if w.S != nil {
		mark(&types.AttributeValueMemberS{Value: *w.S})
	}
	if w.N != nil {
		mark(&types.AttributeValueMemberN{Value: *w.N})
	}
	if w.B != nil {
		mark(&types.AttributeValueMemberB{Value: w.B})
	}
	if w.BOOL != nil {
		mark(&types.AttributeValueMemberBOOL{Value: *w.BOOL})
	}
	if w.NULL != nil {
		mark(&types.AttributeValueMemberNULL{Value: *w.NULL})
	}
	if w.SS != nil {
		mark(&types.AttributeValueMemberSS{Value: w.SS})
	}
	if w.NS != nil {
		mark(&types.AttributeValueMemberNS{Value: w.NS})
	}
	if w.BS != nil {
		mark(&types.AttributeValueMemberBS{Value: w.BS})
	}
	if w.L != nil {
		l := make([]types.AttributeValue, len(w.L))
		for i, e := range w.L {
			l[i] = e.v
		}
		mark(&types.AttributeValueMemberL{Value: l})
	}
	if w.M != nil {
		mark(&types.AttributeValueMemberM{Value: avMap(w.M).item()})
	}
	if set != 1 {
		return validation("Supplied AttributeValue has more than one datatypes set, must contain exactly one of the supported datatypes")
	}
	return nil
}

type avMap map[string]av

func (m avMap) item() Item {
	if m == nil {
		return nil
	}
	out := make(Item, len(m))
	for k, v := range m {
		out[k] = v.v
	}
	return out
}

func items(ms []avMap) []map[string]types.AttributeValue {
	out := make([]map[string]types.AttributeValue, len(ms))
	for i, m := range ms {
		out[i] = m.item()
	}
	return out
}

// jw writes JSON by hand.
type jw struct{ b []byte }

func (w *jw) raw(s string) { w.b = append(w.b, s...) }

func (w *jw) str(s string) {
	w.b = append(w.b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			w.b = append(w.b, c)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				w.b = append(w.b, '\\', '"')
			case '\\':
				w.b = append(w.b, '\\', '\\')
			case '\n':
				w.b = append(w.b, '\\', 'n')
			case '\r':
				w.b = append(w.b, '\\', 'r')
			case '\t':
				w.b = append(w.b, '\\', 't')
			default:
				w.b = append(w.b, fmt.Sprintf(`\u%04x`, c)...)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			w.b = append(w.b, `\ufffd`...)
		} else {
			w.b = append(w.b, s[i:i+n]...)
		}
		i += n
	}
	w.b = append(w.b, '"')
}

func (w *jw) num(f float64) {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		w.b = strconv.AppendInt(w.b, int64(f), 10)
		w.b = append(w.b, ".0"...)
		return
	}
	w.b = strconv.AppendFloat(w.b, f, 'g', -1, 64)
}

func (w *jw) bytes(b []byte) {
	w.b = append(w.b, '"')
	w.b = base64.StdEncoding.AppendEncode(w.b, b)
	w.b = append(w.b, '"')
}

func (w *jw) value(v types.AttributeValue) {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		w.raw(`{"S":`)
		w.str(x.Value)
	case *types.AttributeValueMemberN:
		w.raw(`{"N":`)
		w.str(x.Value)
	case *types.AttributeValueMemberB:
		w.raw(`{"B":`)
		w.bytes(x.Value)
	case *types.AttributeValueMemberBOOL:
		w.raw(`{"BOOL":`)
		w.raw(strconv.FormatBool(x.Value))
	case *types.AttributeValueMemberNULL:
		w.raw(`{"NULL":true`)
	case *types.AttributeValueMemberSS:
		w.raw(`{"SS":[`)
		for i, s := range x.Value {
			w.comma(i)
			w.str(s)
		}
		w.raw("]")
	case *types.AttributeValueMemberNS:
		w.raw(`{"NS":[`)
		for i, s := range x.Value {
			w.comma(i)
			w.str(s)
		}
		w.raw("]")
	case *types.AttributeValueMemberBS:
		w.raw(`{"BS":[`)
		for i, b := range x.Value {
			w.comma(i)
			w.bytes(b)
		}
		w.raw("]")
	case *types.AttributeValueMemberL:
		w.raw(`{"L":[`)
		for i, e := range x.Value {
			w.comma(i)
			w.value(e)
		}
		w.raw("]")
	case *types.AttributeValueMemberM:
		w.raw(`{"M":`)
		w.item(x.Value)
	default:
		w.raw(`{"NULL":true`)
	}
	w.raw("}")
}

func (w *jw) comma(i int) {
	if i > 0 {
		w.b = append(w.b, ',')
	}
}

func (w *jw) item(it Item) {
	w.raw("{")
	i := 0
	for k, v := range it {
		w.comma(i)
		i++
		w.str(k)
		w.raw(":")
		w.value(v)
	}
	w.raw("}")
}

func (w *jw) itemList(its []map[string]types.AttributeValue) {
	w.raw("[")
	for i, it := range its {
		w.comma(i)
		w.item(it)
	}
	w.raw("]")
}

// obj writes an object whose fields fn writes through field.
func (w *jw) obj(fn func(field func(name string) bool)) {
	w.raw("{")
	n := 0
	fn(func(name string) bool {
		w.comma(n)
		n++
		w.str(name)
		w.raw(":")
		return true
	})
	w.raw("}")
}

func (w *jw) capacity(c *types.ConsumedCapacity) {
	w.obj(func(f func(string) bool) {
		if c.TableName != nil && f("TableName") {
			w.str(*c.TableName)
		}
		if c.CapacityUnits != nil && f("CapacityUnits") {
			w.num(*c.CapacityUnits)
		}
		if c.ReadCapacityUnits != nil && f("ReadCapacityUnits") {
			w.num(*c.ReadCapacityUnits)
		}
		if c.WriteCapacityUnits != nil && f("WriteCapacityUnits") {
			w.num(*c.WriteCapacityUnits)
		}
		if c.Table != nil && c.Table.CapacityUnits != nil && f("Table") {
			w.raw(`{"CapacityUnits":`)
			w.num(*c.Table.CapacityUnits)
			w.raw("}")
		}
	})
}

func (w *jw) capacities(cs []types.ConsumedCapacity) {
	w.raw("[")
	for i := range cs {
		w.comma(i)
		w.capacity(&cs[i])
	}
	w.raw("]")
}

func (w *jw) strMap(m map[string]string) {
	w.raw("{")
	i := 0
	for k, v := range m {
		w.comma(i)
		i++
		w.str(k)
		w.raw(":")
		w.str(v)
	}
	w.raw("}")
}
