package outboxcdk

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/jsii-runtime-go"
)

// These tests cover the checks Props has beyond the template parameters'
// own bounds (those are derived from template.yaml in ./example, which
// also synthesizes). Validate runs before New touches its scope, so no
// construct is needed here.

// binDir makes a bin folder as `make build` lays it out, with placeholder
// bootstraps.
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, fn := range functions {
		for _, arch := range []string{"arm64", "amd64"} {
			p := filepath.Join(dir, fn, arch, bootstrapName)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func TestValidate(t *testing.T) {
	bin := binDir(t)
	valid := func() *Props {
		return &Props{
			KafkaBootstrapServers: jsii.String("b-1.example:9092"),
			KafkaAuthMode:         jsii.String(AuthTLS),
			BinDir:                jsii.String(bin),
		}
	}
	noExec := t.TempDir()
	for _, fn := range functions {
		p := filepath.Join(noExec, fn, "arm64", bootstrapName)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		edit  func(*Props)
		field string // "" = valid
		want  string // in the message
	}{
		{name: "valid", edit: func(*Props) {}},
		{name: "sasl-scram-sha-512 needs a secret", edit: func(p *Props) { p.KafkaAuthMode = jsii.String(AuthSASLSCRAM512) },
			field: "KafkaSaslSecretArn", want: "sasl-scram-sha-512"},
		{name: "sasl-scram-sha-256 needs a secret", edit: func(p *Props) { p.KafkaAuthMode = jsii.String(AuthSASLSCRAM256) },
			field: "KafkaSaslSecretArn", want: "sasl-scram-sha-256"},
		{name: "sasl with a secret", edit: func(p *Props) {
			p.KafkaAuthMode = jsii.String(AuthSASLSCRAM512)
			p.KafkaSaslSecretArn = jsii.String("arn:aws:secretsmanager:us-east-1:123456789012:secret:k")
		}},
		{name: "sasl with a secret token", edit: func(p *Props) {
			p.KafkaAuthMode = jsii.String(AuthSASLSCRAM256)
			p.KafkaSaslSecretArn = jsii.String("${Token[TOKEN.123]}")
		}},
		{name: "sasl secret without sasl", edit: func(p *Props) { p.KafkaSaslSecretArn = jsii.String("arn:s") },
			field: "KafkaSaslSecretArn", want: "only by the sasl-scram modes"},
		{name: "mtls needs a client certificate", edit: func(p *Props) { p.KafkaAuthMode = jsii.String(AuthMTLS) },
			field: "KafkaTlsClientCertSecretArn", want: "required"},
		{name: "client certificate without mtls", edit: func(p *Props) { p.KafkaTlsClientCertSecretArn = jsii.String("arn:c") },
			field: "KafkaTlsClientCertSecretArn", want: "only by KafkaAuthMode mtls"},
		{name: "mtls with a client certificate and a CA", edit: func(p *Props) {
			p.KafkaAuthMode = jsii.String(AuthMTLS)
			p.KafkaTlsClientCertSecretArn = jsii.String("arn:c")
			p.KafkaTlsCaSecretArn = jsii.String("arn:ca")
		}},
		{name: "CA without TLS", edit: func(p *Props) {
			p.KafkaAuthMode = jsii.String(AuthNone)
			p.KafkaTlsCaSecretArn = jsii.String("arn:ca")
		}, field: "KafkaTlsCaSecretArn", want: "plaintext"},
		{name: "KMS key without secrets is ignored", edit: func(p *Props) { p.KafkaSecretsKmsKeyArn = jsii.String("arn:k") }},
		{name: "relay reserved concurrency 0", edit: func(p *Props) { p.RelayReservedConcurrency = jsii.Number(0) },
			field: "RelayReservedConcurrency", want: "throttle"},
		{name: "enqueue reserved concurrency 0", edit: func(p *Props) { p.EnqueueReservedConcurrency = jsii.Number(0) },
			field: "EnqueueReservedConcurrency", want: "throttle"},
		{name: "enqueue reserved concurrency 1", edit: func(p *Props) { p.EnqueueReservedConcurrency = jsii.Number(1) },
			field: "EnqueueReservedConcurrency", want: "MaximumConcurrency"},
		{name: "enqueue reserved concurrency none", edit: func(p *Props) { p.EnqueueReservedConcurrency = jsii.Number(-1) }},
		{name: "log level", edit: func(p *Props) { p.LogLevel = jsii.String("debug") },
			field: "LogLevel", want: "DEBUG"},
		{name: "subnets without security groups", edit: func(p *Props) { p.VpcSubnetIds = jsii.Strings("subnet-1") },
			field: "VpcSecurityGroupIds", want: "both or neither"},
		{name: "security groups without subnets", edit: func(p *Props) { p.VpcSecurityGroupIds = jsii.Strings("sg-1") },
			field: "VpcSubnetIds", want: "both or neither"},
		{name: "empty subnet id", edit: func(p *Props) {
			p.VpcSubnetIds = jsii.Strings("subnet-1", "")
			p.VpcSecurityGroupIds = jsii.Strings("sg-1")
		}, field: "VpcSubnetIds", want: "non-empty"},
		{name: "vpc", edit: func(p *Props) {
			p.VpcSubnetIds = jsii.Strings("subnet-1", "subnet-2")
			p.VpcSecurityGroupIds = jsii.Strings("sg-1")
		}},
		{name: "msk cluster that is not an ARN", edit: func(p *Props) {
			p.KafkaAuthMode = jsii.String(AuthMSKIAM)
			p.MskClusterArn = jsii.String("orders")
		}, field: "MskClusterArn", want: "cluster/<name>/<uuid>"},
		{name: "msk cluster ignored without msk-iam", edit: func(p *Props) { p.MskClusterArn = jsii.String("orders") }},
		{name: "number token", edit: func(p *Props) { p.BucketCount = jsii.Number(-1.8881545897087626e+289) },
			field: "BucketCount", want: "not a token"},
		{name: "blank bootstrap servers", edit: func(p *Props) { p.KafkaBootstrapServers = jsii.String("  ") },
			field: "KafkaBootstrapServers", want: "required"},
		{name: "no bin folder", edit: func(p *Props) { p.BinDir = jsii.String(filepath.Join(bin, "missing")) },
			field: "BinDir", want: "make build"},
		{name: "bin for the other architecture only", edit: func(p *Props) {
			p.BinDir = jsii.String(noExec)
			p.Architecture = jsii.String(ArchX86_64)
		}, field: "BinDir", want: filepath.Join("relay", "amd64", "bootstrap")},
		{name: "bootstrap not executable", edit: func(p *Props) { p.BinDir = jsii.String(noExec) },
			field: "BinDir", want: "not executable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := valid()
			tc.edit(p)
			err := p.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var perr *PropError
			if !errors.As(err, &perr) {
				t.Fatalf("Validate = %v, want a *PropError for %s", err, tc.field)
			}
			if perr.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %q (field %s), want field %s and %q", err, perr.Field, tc.field, tc.want)
			}
		})
	}
}

// TestNewRefusesBeforeCreating: New returns the *PropError and touches
// nothing, so a nil scope is never used.
func TestNewRefusesBeforeCreating(t *testing.T) {
	for _, props := range []*Props{nil, {}} {
		ob, err := New(nil, "Outbox", props)
		var perr *PropError
		if ob != nil || !errors.As(err, &perr) || perr.Field != "KafkaBootstrapServers" {
			t.Errorf("New(%+v) = %v, %v; want nil and a *PropError for KafkaBootstrapServers", props, ob, err)
		}
	}
}

// TestBinLayoutMatchesMakefile: BinDir is read as `make build` writes it.
func TestBinLayoutMatchesMakefile(t *testing.T) {
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(b)
	// make build runs in the lambda module's directory (lambda/go.mod) and
	// writes to the repository's bin/.
	if !strings.Contains(mk, "(cd lambda && ") || !strings.Contains(mk, "-o ../bin/$$fn/$$arch/bootstrap") {
		t.Error("make build no longer writes bin/$$fn/$$arch/bootstrap from the lambda module; BinDir's layout (bin/<function>/<goarch>/bootstrap) may be out of date")
	}
	variable := func(name string) []string {
		m := regexp.MustCompile(`(?m)^` + name + `\s*:=\s*(.*)$`).FindStringSubmatch(mk)
		if m == nil {
			t.Fatalf("Makefile has no %s := line", name)
		}
		return strings.Fields(m[1])
	}
	if got, want := variable("LAMBDAS"), append(slices.Clone(functions), optionalFunctions...); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("make build builds %v, the construct deploys %v", got, want)
	}
	if got := variable("ARCHES"); strings.Join(got, " ") != "arm64 amd64" {
		t.Errorf("make build builds for %v, BinDir is read for arm64 and amd64", got)
	}
	for arch, goarch := range map[string]string{ArchARM64: "arm64", ArchX86_64: "amd64"} {
		c := &config{arch: arch, binDir: "bin"}
		if got, want := c.bootstrapDir("relay"), filepath.Join("bin", "relay", goarch); got != want {
			t.Errorf("%s: bootstrapDir = %s, want %s", arch, got, want)
		}
	}
}
