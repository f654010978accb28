package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/aws/jsii-runtime-go"

	"github.com/dynakafka/outbox/cdk"
)

// cdkOnlyProps are Props fields that are not template parameters.
var cdkOnlyProps = map[string]bool{
	"BinDir": true, // SAM builds the functions from source; the CDK takes make build's binaries
}

func propsFields() map[string]bool {
	out := map[string]bool{}
	typ := reflect.TypeOf(outboxcdk.Props{})
	for i := 0; i < typ.NumField(); i++ {
		out[typ.Field(i).Name] = true
	}
	return out
}

// TestPropsMirrorParameterBounds derives, from each template.yaml
// parameter's constraints (MinValue, MaxValue, AllowedValues, MinLength, no
// Default), values on both sides of every bound and checks that Validate
// accepts exactly those CloudFormation would accept, naming the field when
// it refuses. Defaults are checked by TestEquivalence (the example stack
// leaves all but two at their defaults).
func TestPropsMirrorParameterBounds(t *testing.T) {
	s := results(t)
	params, _ := s.sam["Parameters"].(map[string]any)
	bin := filepath.Join(s.dir, "bin")
	base := map[string]string{"KafkaBootstrapServers": "b-1.example:9092", "KafkaAuthMode": "none"}
	type check struct {
		value string // "" with null set: the field left nil
		null  bool
		ok    bool
	}
	for name, p := range params {
		var checks []check
		num := at(p, "Type") == "Number"
		if v, ok := at(p, "MinValue").(float64); ok {
			checks = append(checks, check{value: fmtNum(v), ok: true}, check{value: fmtNum(v - 1)})
		}
		if v, ok := at(p, "MaxValue").(float64); ok {
			checks = append(checks, check{value: fmtNum(v), ok: true}, check{value: fmtNum(v + 1)})
		}
		if allowed, ok := at(p, "AllowedValues").([]any); ok {
			for _, a := range allowed {
				checks = append(checks, check{value: scalar(a), ok: true})
			}
			if num {
				checks = append(checks, check{value: "2"}, check{value: "0"})
			} else {
				checks = append(checks, check{value: "bogus"}, check{value: ""})
			}
		}
		if v, ok := at(p, "MinLength").(float64); ok && v == 1 {
			checks = append(checks, check{value: ""})
		}
		if num {
			checks = append(checks, check{value: "1.5"})
		}
		if at(p, "Default") == nil {
			checks = append(checks, check{null: true})
		}
		if len(checks) == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			for _, c := range checks {
				values := map[string]string{"KafkaSaslSecretArn": secretARN} // needed by sasl-scram-sha-512, ignored otherwise
				for k, v := range base {
					values[k] = v
				}
				if c.null {
					delete(values, name)
				} else {
					values[name] = c.value
				}
				props, err := propsFor(values)
				if err != nil {
					t.Fatal(err)
				}
				props.BinDir = jsii.String(bin)
				err = props.Validate()
				desc := fmt.Sprintf("%s=%q", name, c.value)
				if c.null {
					desc = name + " unset"
				}
				var perr *outboxcdk.PropError
				switch {
				case c.ok && err != nil:
					t.Errorf("%s: %v, want accepted", desc, err)
				case !c.ok && err == nil:
					t.Errorf("%s accepted, want a *PropError", desc)
				case !c.ok && !errors.As(err, &perr):
					t.Errorf("%s: %T %v, want a *PropError", desc, err, err)
				case !c.ok && perr.Field != name:
					t.Errorf("%s: error names %s, want %s: %v", desc, perr.Field, name, err)
				}
			}
		})
	}
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
