package dynamolocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DirEnv names the environment variable that, when set, points at a directory
// holding DynamoDBLocal.jar and DynamoDBLocal_lib; Start then uses it instead
// of running the installer.
const DirEnv = "OUTBOX_DYNAMODB_LOCAL_DIR"

const (
	jarName = "DynamoDBLocal.jar"
	libName = "DynamoDBLocal_lib"

	defaultStartTimeout = 30 * time.Second
	// portAttempts bounds the retries when a port picked as free is taken
	// before java binds it.
	portAttempts = 3
	// outputLimit is how much of java's output is kept for error reports.
	outputLimit = 64 << 10
)

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Dir is the directory holding DynamoDBLocal.jar and DynamoDBLocal_lib.
	// Default: $OUTBOX_DYNAMODB_LOCAL_DIR if set, else the directory printed
	// by the installer script, which installs the engine on first use.
	Dir string
	// Installer is the path of scripts/install-dynamodb-local.sh, used when
	// Dir is not known. Default: found by walking up from the working
	// directory, then from this package's source directory.
	Installer string
	// Java is the java executable. Default: "java" on PATH.
	Java string
	// JavaArgs are extra JVM arguments, put before -jar (for example
	// "-Xmx512m"). Default: none.
	JavaArgs []string
	// Port is the TCP port to listen on, 1-65535. Default: 0, a free port
	// picked at start (retried if another process takes it first).
	Port int
	// StartTimeout bounds the wait from launching java until the engine
	// answers ListTables. Default: 30s. Installing is bounded by ctx only.
	StartTimeout time.Duration
	// Output, if set, also receives java's stdout and stderr as they are
	// written. Default: nil; the last 64 KiB are kept either way and quoted
	// in errors.
	Output io.Writer
	// SharedDB starts the engine with -sharedDb: one database for every
	// access key and region, so that clients with other credentials (a
	// shell's AWS_ACCESS_KEY_ID, boto3's, the AWS CLI's) see the same
	// tables. Default: false, a database per access key and region (tests
	// that emulate a global table's replicas rely on it).
	SharedDB bool
	// LeanJVM starts the JVM with the serial collector and the C1 compiler
	// only (LeanJVMArgs, before JavaArgs): for test suites on a busy
	// machine, where DynamoDB Local is most of the CPU. The same
	// end-to-end test (integration's TestEndToEnd, one busy loop beside it)
	// took 41-55 CPU-seconds of the engine with it against 71-80 without.
	// Benchmarks leave it off: their figures are the default JVM's.
	// Default: false.
	LeanJVM bool
}

// LeanJVMArgs are the JVM arguments Options.LeanJVM adds.
var LeanJVMArgs = []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}

// OptionError reports an invalid or unusable option: which field, and how to
// fix it.
type OptionError struct {
	Field  string
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("dynamolocal: invalid %s: %s", e.Field, e.Reason)
}

// StartError reports that DynamoDB Local could not be installed or started.
// Output holds what the installer or java printed (its tail), which usually
// names the cause.
type StartError struct {
	Op     string // "install", "launch" or "wait"
	Err    error
	Output string
}

func (e *StartError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dynamolocal: %s DynamoDB Local: %v", e.Op, e.Err)
	if out := strings.TrimSpace(e.Output); out != "" {
		b.WriteString("\n--- output ---\n")
		b.WriteString(out)
	}
	return b.String()
}

func (e *StartError) Unwrap() error { return e.Err }

// Instance is a running DynamoDB Local. Stop it when done.
type Instance struct {
	// Endpoint is the base URL to give SDK clients, http://127.0.0.1:<Port>.
	Endpoint string
	// Port is the TCP port the engine listens on.
	Port int
	// Dir is the directory the jar was run from.
	Dir string
	// Version is the engine version DynamoDB Local printed at start (for
	// example "3.3.1"); empty if it printed none.
	Version string

	proc     *process
	output   *tailBuffer
	stopOnce sync.Once
	stopErr  error
}

// Start makes sure DynamoDB Local is installed, starts it in memory on a free
// port and returns once it answers ListTables. ctx bounds the whole start,
// including a first-time install; Options.StartTimeout bounds the wait for
// the engine. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Instance, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	dir, err := resolveDir(ctx, opts)
	if err != nil {
		return nil, err
	}
	java, err := resolveJava(opts.Java)
	if err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = defaultStartTimeout
	}

	attempts := 1
	if opts.Port == 0 {
		attempts = portAttempts
	}
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, &StartError{Op: "launch", Err: fmt.Errorf("pick a free port: %w", err)}
			}
		}
		inst, err := launchAndWait(ctx, java, dir, port, timeout, opts)
		var se *StartError
		if err != nil && attempt < attempts && errors.As(err, &se) && portTaken(se.Output) {
			continue
		}
		return inst, err
	}
}

func (o Options) validate() error {
	switch {
	case o.Port < 0 || o.Port > 65535:
		return &OptionError{Field: "Port", Reason: fmt.Sprintf("%d is not a TCP port; use 1-65535, or 0 to pick a free one", o.Port)}
	case o.StartTimeout < 0:
		return &OptionError{Field: "StartTimeout", Reason: fmt.Sprintf("%v is negative; use a positive duration, or 0 for the default 30s", o.StartTimeout)}
	}
	return nil
}

func resolveDir(ctx context.Context, opts Options) (string, error) {
	dir, field := opts.Dir, "Dir"
	if dir == "" {
		dir, field = os.Getenv(DirEnv), DirEnv
	}
	if dir == "" {
		var err error
		if dir, err = install(ctx, opts.Installer); err != nil {
			return "", err
		}
		field = "installer output"
	}
	if _, err := os.Stat(filepath.Join(dir, jarName)); err != nil {
		return "", &OptionError{Field: field, Reason: fmt.Sprintf("%s has no %s (%v); point it at the directory scripts/install-dynamodb-local.sh prints", dir, jarName, err)}
	}
	return dir, nil
}

func resolveJava(java string) (string, error) {
	if java == "" {
		java = "java"
	}
	path, err := exec.LookPath(java)
	if err != nil {
		return "", &OptionError{Field: "Java", Reason: fmt.Sprintf("%q not found (%v): DynamoDB Local needs Java 17 or newer; install one, e.g. 'apt-get install openjdk-17-jre-headless' (Debian/Ubuntu) or 'brew install openjdk@17' (macOS)", java, err)}
	}
	return path, nil
}

func launchAndWait(ctx context.Context, java, dir string, port int, timeout time.Duration, opts Options) (*Instance, error) {
	args := []string{"-Djava.library.path=" + filepath.Join(dir, libName)}
	if opts.LeanJVM {
		args = append(args, LeanJVMArgs...)
	}
	args = append(args, opts.JavaArgs...)
	args = append(args, "-jar", filepath.Join(dir, jarName), "-inMemory", "-disableTelemetry", "-port", strconv.Itoa(port))
	if opts.SharedDB {
		args = append(args, "-sharedDb")
	}
	cmd := exec.Command(java, args...)
	cmd.Dir = dir
	out := &tailBuffer{limit: outputLimit, tee: opts.Output}
	cmd.Stdout, cmd.Stderr = out, out

	proc, err := launch(cmd)
	if err != nil {
		return nil, &StartError{Op: "launch", Err: err}
	}
	inst := &Instance{
		Endpoint: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Port:     port,
		Dir:      dir,
		proc:     proc,
		output:   out,
	}
	if err := inst.waitReady(ctx, timeout); err != nil {
		inst.kill()
		return nil, &StartError{Op: "wait for", Err: err, Output: hint(out.String())}
	}
	if m := versionRE.FindStringSubmatch(out.String()); m != nil {
		inst.Version = m[1]
	}
	return inst, nil
}

var versionRE = regexp.MustCompile(`(?m)^Version:\s*(\S+)`)

// waitReady polls ListTables until the engine answers, the process exits, or
// the timeout passes.
func (i *Instance) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := NewConfig(ctx, i.Endpoint, "us-east-1")
	if err != nil {
		return err
	}
	client := NewClient(cfg, i.Endpoint, func(o *dynamodb.Options) {
		o.Retryer = aws.NopRetryer{}
	})
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		probe, cancelProbe := context.WithTimeout(ctx, time.Second)
		_, err := client.ListTables(probe, &dynamodb.ListTablesInput{})
		cancelProbe()
		if err == nil {
			return nil
		}
		select {
		case <-i.proc.Exited:
			return fmt.Errorf("java exited before the engine answered: %v", i.proc.Err)
		case <-ctx.Done():
			return fmt.Errorf("no answer to ListTables at %s (%v, StartTimeout %v; last error: %v)", i.Endpoint, ctx.Err(), timeout, err)
		case <-tick.C:
		}
	}
}

// Stop kills DynamoDB Local (its whole process group) and waits for it to
// exit. It is safe to call more than once. It returns an error only if the
// engine had already exited on its own, which means it crashed under the
// caller; the error quotes its output.
func (i *Instance) Stop() error {
	i.stopOnce.Do(func() {
		select {
		case <-i.proc.Exited:
			i.stopErr = fmt.Errorf("dynamolocal: DynamoDB Local at %s had exited before Stop: %v\n--- output ---\n%s",
				i.Endpoint, i.proc.Err, strings.TrimSpace(i.output.String()))
		default:
		}
		i.kill()
	})
	return i.stopErr
}

// Output returns the tail (up to 64 KiB) of what java has printed so far.
func (i *Instance) Output() string { return i.output.String() }

// PID returns the process id of the java process.
func (i *Instance) PID() int { return i.proc.Cmd.Process.Pid }

func (i *Instance) kill() { i.proc.Kill() }

// freePort asks the kernel for a port that is free right now on all
// interfaces (DynamoDB Local listens on all of them).
func freePort() (int, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portTaken(output string) bool {
	return strings.Contains(output, "Address already in use") || strings.Contains(output, "BindException")
}

// hint prefixes java's output with the likely fix for causes whose Java
// message is cryptic.
func hint(output string) string {
	if strings.Contains(output, "UnsupportedClassVersionError") {
		return "(this java is older than 17: DynamoDB Local needs Java 17 or newer)\n" + output
	}
	return output
}

// tailBuffer keeps the last limit bytes written to it, optionally copying
// every write to tee. Safe for concurrent use (java's stdout and stderr are
// copied by two goroutines).
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	tee   io.Writer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	if b.tee != nil {
		_, _ = b.tee.Write(p) // a failing observer must not stop the engine
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
