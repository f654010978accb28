package deploy

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// compose is the part of a Compose file the tests look at.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		Environment map[string]string `yaml:"environment"`
		Networks    []string          `yaml:"networks"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Networks map[string]struct {
		Name string `yaml:"name"`
	} `yaml:"networks"`
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	src, err := os.ReadFile("../localstack/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(src, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

var imageTag = regexp.MustCompile(`^([a-z0-9/_.-]+):(\d+)\.(\d+)\.(\d+)$`)

// version splits "repo:X.Y.Z"; ok is false for any other form (latest, a
// date tag, no tag).
func version(image string) (repo string, v [3]int, ok bool) {
	m := imageTag.FindStringSubmatch(image)
	if m == nil {
		return "", v, false
	}
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+2])
	}
	return m[1], v, true
}

func TestComposeFile(t *testing.T) {
	c := loadCompose(t)
	ls, kafka := c.Services["localstack"], c.Services["kafka"]
	network := c.Networks["outbox"].Name

	t.Run("localstack image runs without a token", func(t *testing.T) {
		// From 2026.03.0 (and `latest` since 23 March 2026) LocalStack
		// needs LOCALSTACK_AUTH_TOKEN; 4.14.0 is the last community release.
		// 4.x is needed for the stream event source features the template
		// uses (filtering, bisect, on-failure destinations).
		repo, v, ok := version(ls.Image)
		if !ok || repo != "localstack/localstack" {
			t.Fatalf("localstack image %q: want localstack/localstack:X.Y.Z pinned", ls.Image)
		}
		if v[0] != 4 || v[1] > 14 {
			t.Errorf("localstack image %s: want 4.x up to 4.14.x, the releases that run without an auth token", ls.Image)
		}
		for k := range ls.Environment {
			if strings.Contains(k, "AUTH_TOKEN") || strings.Contains(k, "API_KEY") {
				t.Errorf("localstack environment sets %s", k)
			}
		}
	})
	t.Run("localstack wiring", func(t *testing.T) {
		if !hasSuffix(ls.Ports, ":4566:4566") && !slices.Contains(ls.Ports, "4566:4566") {
			t.Errorf("localstack ports %v do not publish 4566", ls.Ports)
		}
		if !slices.Contains(ls.Volumes, "/var/run/docker.sock:/var/run/docker.sock") {
			t.Errorf("localstack volumes %v: the Docker socket is needed to run Lambda containers", ls.Volumes)
		}
		if network == "" || ls.Environment["LAMBDA_DOCKER_NETWORK"] != network {
			t.Errorf("LAMBDA_DOCKER_NETWORK = %q, want the network's fixed name %q", ls.Environment["LAMBDA_DOCKER_NETWORK"], network)
		}
		if !slices.Contains(ls.Networks, "outbox") || !slices.Contains(kafka.Networks, "outbox") {
			t.Errorf("localstack (%v) and kafka (%v) must share network outbox", ls.Networks, kafka.Networks)
		}
	})
	t.Run("kafka single node KRaft", func(t *testing.T) {
		repo, _, ok := version(kafka.Image)
		if !ok || repo != "apache/kafka" {
			t.Errorf("kafka image %q: want apache/kafka:X.Y.Z pinned", kafka.Image)
		}
		env := kafka.Environment
		if roles := strings.Split(env["KAFKA_PROCESS_ROLES"], ","); !slices.Contains(roles, "broker") || !slices.Contains(roles, "controller") {
			t.Errorf("KAFKA_PROCESS_ROLES = %q, want broker,controller", env["KAFKA_PROCESS_ROLES"])
		}
		if env["KAFKA_CONTROLLER_QUORUM_VOTERS"] != env["KAFKA_NODE_ID"]+"@kafka:9093" {
			t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS = %q, want this node alone", env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
		}
		for _, k := range []string{"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"} {
			if env[k] != "1" {
				t.Errorf("%s = %q, want 1 on a single node", k, env[k])
			}
		}
		if !hasSuffix(kafka.Ports, ":9092:9092") && !slices.Contains(kafka.Ports, "9092:9092") {
			t.Errorf("kafka ports %v do not publish 9092 for the host", kafka.Ports)
		}
		if kafka.Healthcheck == nil || len(kafka.Healthcheck.Test) == 0 {
			t.Error("kafka has no healthcheck")
		}
	})
	t.Run("listeners reachable from Lambda and host", func(t *testing.T) {
		adv := listeners(kafka.Environment["KAFKA_ADVERTISED_LISTENERS"])
		bound := listeners(kafka.Environment["KAFKA_LISTENERS"])
		protocols := listeners(kafka.Environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"])
		for _, want := range []string{"kafka:19092", "localhost:9092"} {
			name, ok := adv[want]
			if !ok {
				t.Errorf("KAFKA_ADVERTISED_LISTENERS %q does not advertise %s", kafka.Environment["KAFKA_ADVERTISED_LISTENERS"], want)
				continue
			}
			_, port, _ := strings.Cut(want, ":")
			if !strings.HasSuffix(keyOf(bound, name), ":"+port) {
				t.Errorf("listener %s advertised as %s is not bound on port %s: %q", name, want, port, kafka.Environment["KAFKA_LISTENERS"])
			}
			if keyOf(protocols, name) == "" {
				t.Errorf("listener %s has no security protocol", name)
			}
		}
		// What init.sh gives the functions must be what Kafka advertises
		// on the network LocalStack's Lambdas join.
		if got := initParams(t)["KafkaBootstrapServers"]; got != "kafka:19092" {
			t.Errorf("init.sh passes KafkaBootstrapServers=%s, want kafka:19092", got)
		}
	})
}

// listeners parses "NAME://host:port,..." into host:port -> NAME, and
// "NAME:PROTO,..." into PROTO -> NAME.
func listeners(s string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(s, ",") {
		if name, addr, ok := strings.Cut(l, "://"); ok {
			out[addr] = name
		} else if name, proto, ok := strings.Cut(l, ":"); ok {
			out[proto+"/"+name] = name
		}
	}
	return out
}

func keyOf(m map[string]string, value string) string {
	for k, v := range m {
		if v == value {
			return k
		}
	}
	return ""
}

func hasSuffix(list []string, s string) bool {
	for _, x := range list {
		if strings.HasSuffix(x, s) {
			return true
		}
	}
	return false
}

// TestComposeConfig asks Docker Compose itself to validate the file. It needs
// no Docker engine.
func TestComposeConfig(t *testing.T) {
	var cmd []string
	switch {
	case exec.Command("docker", "compose", "version").Run() == nil:
		cmd = []string{"docker", "compose"}
	default:
		if _, err := exec.LookPath("docker-compose"); err != nil {
			t.Skip("neither docker compose nor docker-compose is installed, so docker-compose.yml was only parsed as YAML")
		}
		cmd = []string{"docker-compose"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd[0], append(cmd[1:], "-f", "docker-compose.yml", "config", "-q")...)
	c.Dir = "../localstack"
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(cmd, " "), err, out)
	}
}

func TestInitScriptLints(t *testing.T) {
	t.Run("bash -n", func(t *testing.T) {
		if out, err := exec.Command("bash", "-n", "../localstack/init.sh").CombinedOutput(); err != nil {
			t.Fatalf("bash -n: %v\n%s", err, out)
		}
	})
	t.Run("shellcheck", func(t *testing.T) {
		if _, err := exec.LookPath("shellcheck"); err != nil {
			t.Skip("shellcheck is not installed, so init.sh was only checked with bash -n")
		}
		if out, err := exec.Command("shellcheck", "../localstack/init.sh").CombinedOutput(); err != nil {
			t.Fatalf("shellcheck: %v\n%s", err, out)
		}
	})
	t.Run("executable", func(t *testing.T) {
		fi, err := os.Stat("../localstack/init.sh")
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&0o111 == 0 {
			t.Errorf("init.sh is not executable (%v)", fi.Mode())
		}
	})
}

// initParams reads the parameter overrides init.sh passes: the lines
// "Name=value" of its params=( ... ) array.
func initParams(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("../localstack/init.sh")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	in := false
	line := regexp.MustCompile(`^\s*"([A-Za-z0-9]+)=([^"]*)"\s*$`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		s := sc.Text()
		switch {
		case strings.TrimSpace(s) == "params=(":
			in = true
		case in && strings.TrimSpace(s) == ")":
			in = false
		case in:
			m := line.FindStringSubmatch(s)
			if m == nil {
				t.Fatalf("init.sh params line %q is not \"Name=value\"", s)
			}
			out[m[1]] = m[2]
		}
	}
	if len(out) == 0 {
		t.Fatal("init.sh has no params=( ... ) array")
	}
	return out
}

// TestInitScriptParameters: init.sh names only parameters the template has,
// and every one that has no default.
func TestInitScriptParameters(t *testing.T) {
	tmpl := loadTemplate(t)
	given := initParams(t)
	params := tmpl["Parameters"].(map[string]any)
	for name := range given {
		if params[name] == nil {
			t.Errorf("init.sh overrides %s, which template.yaml does not declare", name)
		}
	}
	for name, p := range params {
		if at(p, "Default") == nil && given[name] == "" {
			t.Errorf("init.sh does not pass %s, which has no default", name)
		}
	}
	if auth := given["KafkaAuthMode"]; auth != "none" {
		t.Errorf("init.sh passes KafkaAuthMode=%s; the compose Kafka is plaintext", auth)
	}
}

// stubs are fake docker, curl, go and aws commands for running init.sh
// without Docker or LocalStack. Each appends its command line to $STUB_LOG.
// The aws stub answers from STUB_* variables.
var stubs = map[string]string{
	"docker": `#!/bin/bash
echo "docker $*" >> "$STUB_LOG"
`,
	"curl": `#!/bin/bash
echo "curl $*" >> "$STUB_LOG"
`,
	"go": `#!/bin/bash
echo "go $* CGO_ENABLED=$CGO_ENABLED GOOS=$GOOS GOARCH=$GOARCH" >> "$STUB_LOG"
while [ $# -gt 0 ]; do
	if [ "$1" = -o ]; then printf 'bin' > "$2"; chmod +x "$2"; fi
	shift
done
`,
	"aws": `#!/bin/bash
echo "aws $*" >> "$STUB_LOG"
case "$*" in
*"s3api head-bucket"*) exit 254 ;;
*"cloudformation package"*)
	while [ $# -gt 0 ]; do
		if [ "$1" = --output-template-file ]; then echo packaged > "$2"; fi
		shift
	done ;;
*"cloudformation describe-stacks"*)
	case "$*" in
	*MessagesTableName*) echo outbox-MessagesTable-1 ;;
	*ControlTableName*) echo outbox-ControlTable-1 ;;
	*RelayFunctionName*) echo outbox-RelayFunction-1 ;;
	*SweeperFunctionName*) echo outbox-SweeperFunction-1 ;;
	esac ;;
*"dynamodb get-item"*)
	if [ -n "$STUB_GET_ERROR" ]; then
		echo "$STUB_GET_ERROR" >&2
		exit 254
	fi
	echo "${STUB_STORED_BC:-8}" ;;
*"lambda invoke"*)
	for last; do :; done
	echo '{}' > "$last"
	echo "${STUB_FUNCTION_ERROR:-None}" ;;
esac
`,
}

// TestInitScriptFlow runs init.sh against the stubs: the order of its steps,
// the arguments it builds, and how it handles an existing config item and a
// failing function.
func TestInitScriptFlow(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("init.sh is a bash script")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	stubDir := t.TempDir()
	for name, src := range stubs {
		if err := os.WriteFile(filepath.Join(stubDir, name), []byte(src), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	arch := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[runtime.GOARCH]
	if arch == "" {
		t.Skipf("init.sh supports amd64 and arm64 machines, not %s", runtime.GOARCH)
	}
	tests := []struct {
		name    string
		env     []string
		wantErr string   // "" = success
		want    []string // substrings of log lines, in this order
		absent  []string
	}{
		{
			name: "fresh stack",
			want: []string{
				"curl -fsS http://localhost:4566/_localstack/health",
				"exec -T kafka /opt/kafka/bin/kafka-broker-api-versions.sh --bootstrap-server kafka:19092",
				"kafka-topics.sh --bootstrap-server kafka:19092 --create --if-not-exists --topic outbox-smoke",
				"go build -trimpath -tags lambda.norpc -ldflags=-s -w -o ",
				"/lambda/relay/bootstrap ./relay CGO_ENABLED=0 GOOS=linux GOARCH=" + runtime.GOARCH,
				"/lambda/sweeper/bootstrap ./sweeper CGO_ENABLED=0 GOOS=linux GOARCH=" + runtime.GOARCH,
				"/lambda/setup/bootstrap ./setup CGO_ENABLED=0 GOOS=linux GOARCH=" + runtime.GOARCH,
				"s3 mb s3://outbox-artifacts",
				"cloudformation package --template-file ",
				"cloudformation deploy --template-file ",
				"--capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND",
				"--parameter-overrides KafkaBootstrapServers=kafka:19092 KafkaAuthMode=none BucketCount=8 Topics=outbox-smoke Architecture=" + arch,
				// The stack wrote the config item; init.sh only checks it.
				`dynamodb get-item --table-name outbox-ControlTable-1 --consistent-read --key {"pk":{"S":"config"},"sk":{"S":"config"}}`,
				"lambda invoke --function-name outbox-SweeperFunction-1",
			},
			absent: []string{"dynamodb put-item"},
		},
		{
			name:    "config item with another bucket count",
			env:     []string{"STUB_STORED_BC=16"},
			wantErr: "the config item says BucketCount=16, not 8",
			absent:  []string{"lambda invoke"},
		},
		{
			name:    "bucket count from the environment",
			env:     []string{"BUCKET_COUNT=16", "STUB_STORED_BC=16", "STACK_NAME=other", "OUTBOX_TOPIC=t1"},
			want:    []string{"--create --if-not-exists --topic t1", "--stack-name other", "BucketCount=16 Topics=t1", "dynamodb get-item", "lambda invoke"},
			wantErr: "",
		},
		{
			name:    "the config item cannot be read",
			env:     []string{"STUB_GET_ERROR=An error occurred (ResourceNotFoundException) when calling the GetItem operation"},
			wantErr: "reading the config item: An error occurred (ResourceNotFoundException)",
			absent:  []string{"lambda invoke"},
		},
		{
			name:    "the sweeper fails at init",
			env:     []string{"STUB_FUNCTION_ERROR=Unhandled"},
			wantErr: "the sweeper failed (Unhandled)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logFile := filepath.Join(t.TempDir(), "log")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, "../localstack/init.sh")
			cmd.Env = append([]string{
				"PATH=" + stubDir + ":/usr/bin:/bin",
				"HOME=" + t.TempDir(),
				"STUB_LOG=" + logFile,
			}, tc.env...)
			out, err := cmd.CombinedOutput()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("init.sh: %v\n%s", err, out)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("init.sh succeeded, want failure %q\n%s", tc.wantErr, out)
			case tc.wantErr != "" && !strings.Contains(string(out), tc.wantErr):
				t.Fatalf("init.sh output lacks %q:\n%s", tc.wantErr, out)
			}
			b, _ := os.ReadFile(logFile)
			log := string(b)
			pos := 0
			for _, w := range tc.want {
				i := strings.Index(log[pos:], w)
				if i < 0 {
					t.Fatalf("after offset %d, the command log lacks %q:\n%s", pos, w, log)
				}
				pos += i + len(w)
			}
			for _, a := range tc.absent {
				if strings.Contains(log, a) {
					t.Errorf("the command log has %q:\n%s", a, log)
				}
			}
		})
	}
}

// TestLocalStackReadme: the README tells how to point the integration suites
// at the compose services, and says this was never run where it was written.
func TestLocalStackReadme(t *testing.T) {
	b, err := os.ReadFile("../localstack/README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{
		"OUTBOX_TEST_DYNAMODB_ENDPOINT=http://localhost:4566",
		"OUTBOX_TEST_KAFKA_BROKERS=localhost:9092",
		"docker compose up -d",
		"./init.sh",
		"LOCALSTACK_AUTH_TOKEN",
		"no Docker engine",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("localstack/README.md does not mention %q", want)
		}
	}
	if image := loadCompose(t).Services["localstack"].Image; !strings.Contains(doc, image) {
		t.Errorf("localstack/README.md does not name the pinned image %s", image)
	}
}
