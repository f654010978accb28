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
				values := map[string]string{}
				for k, v := range base {
					values[k] = v
				}
				if c.null {
					delete(values, name)
				} else {
					values[name] = c.value
				}
				withSecrets(values)
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

// withSecrets adds the Kafka secret the auth mode requires, and the
// regions and tables that Tables global and attach require, so that a
// check of another parameter is not refused by the template's Rules.
func withSecrets(values map[string]string) {
	switch values["Tables"] {
	case "global":
		values["Regions"] = "us-east-1,eu-west-1"
	case "attach":
		values["Regions"] = "us-east-1,eu-west-1"
		values["MessagesTableName"], values["ControlTableName"] = "m-table", "c-table"
	}
	switch values["KafkaAuthMode"] {
	case "sasl-scram-sha-256", "sasl-scram-sha-512":
		values["KafkaSaslSecretArn"] = secretARN
	case "mtls":
		values["KafkaTlsClientCertSecretArn"] = certARN
	}
}

// TestPropsMirrorRules evaluates template.yaml's Rules for every
// combination of the settings they constrain and checks that Validate
// refuses exactly the combinations CloudFormation would refuse, naming one
// of the parameters the failed assertion refers to.
func TestPropsMirrorRules(t *testing.T) {
	s := results(t)
	bin := filepath.Join(s.dir, "bin")
	modes := []string{"none", "tls", "mtls", "sasl-scram-sha-256", "sasl-scram-sha-512", "msk-iam"}
	vpcs := []map[string]string{
		{},
		{"VpcSubnetIds": "subnet-1,subnet-2", "VpcSecurityGroupIds": "sg-1"},
		{"VpcSubnetIds": "subnet-1"},
		{"VpcSecurityGroupIds": "sg-1"},
	}
	combos, refused := 0, 0
	for _, mode := range modes {
		for _, secrets := range subsets(map[string]string{"KafkaSaslSecretArn": secretARN, "KafkaTlsCaSecretArn": caARN, "KafkaTlsClientCertSecretArn": certARN}) {
			for _, vpc := range vpcs {
				for _, reserved := range []string{"-1", "0", "5"} {
					values := map[string]string{"KafkaBootstrapServers": "b-1.example:9092", "KafkaAuthMode": mode, "RelayReservedConcurrency": reserved}
					for k, v := range secrets {
						values[k] = v
					}
					for k, v := range vpc {
						values[k] = v
					}
					combos++
					if mirrorRules(t, s, bin, values) {
						refused++
					}
				}
			}
		}
	}
	t.Logf("%d combinations, %d refused by both", combos, refused)

	// Where the tables come from: Tables against Regions and the attached
	// table names.
	combos, refused = 0, 0
	for _, tables := range []string{"", "create", "global", "attach"} {
		for _, regions := range []string{"", "us-east-1,eu-west-1"} {
			for _, names := range subsets(map[string]string{"MessagesTableName": "m-table", "ControlTableName": "c-table"}) {
				values := map[string]string{"KafkaBootstrapServers": "b-1.example:9092", "KafkaAuthMode": "none"}
				if tables != "" {
					values["Tables"] = tables
				}
				if regions != "" {
					values["Regions"] = regions
				}
				for k, v := range names {
					values[k] = v
				}
				combos++
				if mirrorRules(t, s, bin, values) {
					refused++
				}
			}
		}
	}
	t.Logf("tables: %d combinations, %d refused by both", combos, refused)
}

// mirrorRules checks one combination: Validate refuses it exactly when the
// template's Rules do, naming a parameter of a failed rule; it reports
// whether both refused.
func mirrorRules(t *testing.T, s *synthesized, bin string, values map[string]string) bool {
	t.Helper()
	e, err := newEvaluator(s.sam, nil, values)
	if err != nil {
		t.Fatal(err)
	}
	refusals, err := e.Refusals()
	if err != nil {
		t.Fatal(err)
	}
	props, err := propsFor(values)
	if err != nil {
		t.Fatal(err)
	}
	props.BinDir = jsii.String(bin)
	err = props.Validate()
	var perr *outboxcdk.PropError
	switch {
	case len(refusals) == 0 && err != nil:
		t.Errorf("%v: CloudFormation accepts it, Validate: %v", values, err)
	case len(refusals) > 0 && err == nil:
		t.Errorf("%v: accepted, CloudFormation refuses it: %s", values, refusals[0].Description)
	case len(refusals) > 0 && !errors.As(err, &perr):
		t.Errorf("%v: %T %v, want a *PropError", values, err, err)
	case len(refusals) > 0:
		for _, r := range refusals {
			for _, p := range r.Params {
				if p == perr.Field {
					return true
				}
			}
		}
		t.Errorf("%v: Validate names %s; the failed rules refer to %v", values, perr.Field, refusals)
		return true
	}
	return false
}

// subsets returns every subset of m.
func subsets(m map[string]string) []map[string]string {
	out := []map[string]string{{}}
	for k, v := range m {
		for _, s := range out[:len(out):len(out)] {
			n := map[string]string{k: v}
			for k2, v2 := range s {
				n[k2] = v2
			}
			out = append(out, n)
		}
	}
	return out
}
