package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Exit codes; the package comment and `outbox --help` document them.
const (
	exitOK            = 0
	exitFailed        = 1
	exitUsage         = 2
	exitMisconfigured = 3
	exitNotDrained    = 4
)

// app is what one invocation runs in; tests replace every part.
type app struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	getenv         func(string) string
	now            func() time.Time
	relayID        func() string // drain's relay id in leases
	// connect builds the DynamoDB client; it is the first thing that may
	// touch the network, and runs only after the whole command line passed.
	connect func(ctx context.Context, c connection) (*session, error)
}

// action is a command's work, returned only once its arguments are valid.
type action func(ctx context.Context, a *app, s *session) error

// command is one subcommand.
type command struct {
	name        string
	args        string // positional arguments in the synopsis
	summary     string // one line, for `outbox --help`
	description string
	example     string
	timeout     time.Duration // default of --timeout
	// standalone commands (outbox local) take no connection flags and get
	// no session: they run until they are done or interrupted.
	standalone bool
	// bind registers the command's flags on fs and returns the check that
	// runs after parsing: it validates everything it can without I/O and
	// returns the action or a *usageError.
	bind func(fs *flag.FlagSet) func(a *app, c *connection, args []string) (action, error)
}

var commands = []*command{statusCommand, parkedCommand, parkCommand, replayCommand, dropCommand, drainCommand, initCommand, bucketsCommand, regionsCommand,
	enqueueCommand, localCommand}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usageError is a wrong command line: exit code 2, with a pointer to --help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// restated is an error told in the operator's words; it still matches
// what it wraps.
type restated struct {
	msg string
	err error
}

func (e *restated) Error() string { return e.msg }
func (e *restated) Unwrap() error { return e.err }

// notDrainedError: drain ended without draining the bucket, for a reason
// that is not a failure (exit code 4).
type notDrainedError struct{ err error }

func (e *notDrainedError) Error() string { return e.err.Error() }
func (e *notDrainedError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var (
		ue *usageError
		me *outbox.MisconfigurationError
		nd *notDrainedError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &me), errors.Is(err, dynamo.ErrNoConfig), errors.As(err, new(*dynamo.TableError)):
		return exitMisconfigured
	case errors.As(err, &nd):
		return exitNotDrained
	}
	return exitFailed
}

// run runs one command line and returns the exit code.
func (a *app) run(ctx context.Context, args []string) int {
	c, conn, act, code := a.prepare(args)
	if act == nil {
		return code
	}
	if c.standalone {
		return a.fail(c.name, act(ctx, a, nil))
	}
	ctx, cancel := context.WithTimeout(ctx, conn.timeout)
	defer cancel()
	s, err := a.connect(ctx, *conn)
	if err == nil {
		err = act(ctx, a, s)
	}
	return a.fail(c.name, err)
}

// prepare checks a command line completely, without I/O: it returns the
// command, its connection and its action, or a nil action and the exit code
// (help was printed, or a usage error reported).
func (a *app) prepare(args []string) (*command, *connection, action, int) {
	if len(args) == 0 {
		a.topUsage(a.stderr)
		return nil, nil, nil, exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			c := lookup(args[1])
			if c == nil {
				return nil, nil, nil, a.fail("", usagef("unknown command %q", args[1]))
			}
			fs, _, _ := c.flags()
			c.usage(a.stdout, fs)
			return nil, nil, nil, exitOK
		}
		a.topUsage(a.stdout)
		return nil, nil, nil, exitOK
	}
	c := lookup(args[0])
	if c == nil {
		return nil, nil, nil, a.fail("", usagef("unknown command %q", args[0]))
	}
	fs, conn, check := c.flags()
	pos, err := parseArgs(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		c.usage(a.stdout, fs)
		return nil, nil, nil, exitOK
	}
	if err != nil {
		return nil, nil, nil, a.fail(c.name, flagError(err))
	}
	if !c.standalone {
		if err := conn.resolve(a.getenv); err != nil {
			return nil, nil, nil, a.fail(c.name, err)
		}
	}
	act, err := check(a, conn, pos)
	if err != nil {
		return nil, nil, nil, a.fail(c.name, err)
	}
	return c, conn, act, exitOK
}

// fail reports err (if any) on stderr and returns its exit code.
func (a *app) fail(cmd string, err error) int {
	if err == nil {
		return exitOK
	}
	prefix, help := "outbox", "outbox --help"
	if cmd != "" {
		prefix, help = "outbox "+cmd, "outbox "+cmd+" --help"
	}
	fmt.Fprintf(a.stderr, "%s: %v\n", prefix, err)
	code := exitCode(err)
	if code == exitUsage {
		fmt.Fprintf(a.stderr, "Run '%s' for usage.\n", help)
	}
	return code
}

// flags returns a new flag set with c's flags and the connection flags, the
// connection they fill, and c's check.
func (c *command) flags() (*flag.FlagSet, *connection, func(*app, *connection, []string) (action, error)) {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	conn := &connection{}
	if !c.standalone {
		conn.register(fs, c.timeout)
	}
	return fs, conn, c.bind(fs)
}

// parseArgs parses flags wherever they appear among the positional
// arguments (`outbox drain 3 --brokers b:9092`); everything after "--" is
// positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

var flagName = regexp.MustCompile(`for (flag )?-([A-Za-z][\w-]*)`)

// flagError restates the flag package's errors in the --name form the help
// uses.
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if _, numErr := strconv.Atoi(name); numErr == nil {
			return usagef("unknown flag -%s (bucket and sequence numbers are never negative)", name)
		}
		return usagef("unknown flag --%s", name)
	}
	return &usageError{flagName.ReplaceAllString(msg, "for --$2")}
}

// connection is where the outbox is: the flags every command shares.
type connection struct {
	messages, control string
	region, endpoint  string
	local             bool
	timeout           time.Duration
}

var connectionFlags = map[string]bool{"messages": true, "control": true, "region": true, "endpoint": true, "local": true, "timeout": true}

func (c *connection) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&c.messages, "messages", "", "the outbox's messages `TABLE` (env OUTBOX_MESSAGES_TABLE)")
	fs.StringVar(&c.control, "control", "", "the outbox's control `TABLE` (env OUTBOX_CONTROL_TABLE)")
	fs.StringVar(&c.region, "region", "", "AWS `REGION` (default: the SDK's, from AWS_REGION or the profile)")
	fs.StringVar(&c.endpoint, "endpoint", "", "DynamoDB endpoint `URL` (LocalStack, a VPC or FIPS endpoint); credentials still come from the SDK's chain")
	fs.BoolVar(&c.local, "local", false, "use DynamoDB Local's static test credentials instead of the SDK's chain (needs --endpoint)")
	fs.DurationVar(&c.timeout, "timeout", timeout, "give up after this `DURATION`")
}

// resolve fills the table names from the environment and checks the flags.
func (c *connection) resolve(getenv func(string) string) error {
	if c.messages == "" {
		c.messages = getenv("OUTBOX_MESSAGES_TABLE")
	}
	if c.control == "" {
		c.control = getenv("OUTBOX_CONTROL_TABLE")
	}
	switch {
	case c.messages == "":
		return usagef("--messages is required (or OUTBOX_MESSAGES_TABLE): the outbox's messages table")
	case c.control == "":
		return usagef("--control is required (or OUTBOX_CONTROL_TABLE): the outbox's control table")
	case c.local && c.endpoint == "":
		return usagef("--local needs --endpoint: DynamoDB Local's URL, for example http://127.0.0.1:8000")
	case c.timeout <= 0:
		return usagef("--timeout %v: must be positive", c.timeout)
	}
	if c.endpoint != "" {
		u, err := url.Parse(c.endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("--endpoint %q: not an http(s) URL; for example https://dynamodb-fips.us-east-1.amazonaws.com or http://127.0.0.1:8000", c.endpoint)
		}
	}
	return nil
}

// session is an open connection to the outbox's tables.
type session struct {
	aws    aws.Config
	db     *dynamodb.Client
	tables dynamo.Tables
}

// store opens the outbox: it checks that both tables exist and belong
// together (dynamo.CheckTables), then reads the config item.
func (s *session) store(ctx context.Context, opts ...dynamo.StoreOption) (*dynamo.Store, error) {
	if err := dynamo.CheckTables(ctx, s.db, s.tables); err != nil {
		return nil, err
	}
	return dynamo.NewStore(ctx, s.db, s.tables, opts...)
}

// connect builds the client: the SDK's default credential chain, with the
// endpoint overridden for DynamoDB only, or DynamoDB Local's static
// credentials with --local.
func connect(ctx context.Context, c connection) (*session, error) {
	s := &session{tables: dynamo.Tables{Messages: c.messages, Control: c.control}}
	if c.local {
		cfg, err := dynamolocal.NewConfig(ctx, c.endpoint, c.region)
		if err != nil {
			return nil, err
		}
		s.aws, s.db = cfg, dynamolocal.NewClient(cfg, c.endpoint)
		return s, nil
	}
	var opts []func(*awsconfig.LoadOptions) error
	if c.region != "" {
		opts = append(opts, awsconfig.WithRegion(c.region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load the AWS configuration: %w", err)
	}
	// Before anything is sent: without credentials the SDK's chain ends at
	// the EC2 instance metadata service, whose error names neither cause
	// nor fix.
	if cfg.Credentials == nil {
		return nil, errors.New("load the AWS configuration: it has no credentials provider")
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, &restated{msg: "no AWS credentials: the SDK's chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared " +
			"config files, SSO, the container or instance role) found none. Set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; " +
			"for DynamoDB Local, paste the lines `outbox local` prints, or pass --local --endpoint URL. (The SDK said: " + err.Error() + ")", err: err}
	}
	s.aws = cfg
	endpoint := c.endpoint
	for _, v := range []string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"} { // as the SDK reads them
		if endpoint == "" {
			endpoint = os.Getenv(v)
		}
	}
	s.db = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if c.endpoint != "" {
			o.BaseEndpoint = aws.String(c.endpoint)
		}
		// DynamoDB Local (the lines `outbox local` prints) sends no CRC32
		// with its error responses: the SDK would warn of a checksum
		// mismatch at every expected error.
		o.DisableValidateResponseChecksum = loopback(endpoint)
	})
	return s, nil
}

// loopback reports whether endpoint is a URL on this machine.
func loopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	return u.Hostname() == "localhost" || ip != nil && ip.IsLoopback()
}

const exitCodesHelp = `Exit codes:
  0  done
  1  failed: DynamoDB, Kafka or AWS refused or could not be reached; nothing parked there
  2  usage: unknown command, bad or missing flag or argument; nothing was sent
     (except when a bucket turns out to lie beyond the outbox's BucketCount)
  3  the outbox disagrees: a missing table, no config item, another BucketCount, mode or shared setting,
     a table of another layout, tables that do not belong together (swapped or mistyped names)
  4  drain did not finish: another relay holds the bucket (it was woken and drains
     again), a gap is still pending, or the deadline came first; buckets set was
     aborted before its flip (the previous change's old buckets did not drain by
     --change-timeout, or Ctrl-C): nothing written, the count stays
`

func (a *app) topUsage(w io.Writer) {
	fmt.Fprint(w, `outbox shows and repairs a transactional outbox's DynamoDB tables.

Usage:
  outbox COMMAND [flags]
  outbox help COMMAND

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, "\nConnection flags (every command but local):\n")
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	(&connection{}).register(fs, 0)
	printFlags(w, fs, func(string) bool { return true })
	fmt.Fprint(w, "\n"+exitCodesHelp+"\nRun 'outbox COMMAND --help' for a command's flags and an example.\n")
}

func (c *command) usage(w io.Writer, fs *flag.FlagSet) {
	synopsis := "outbox " + c.name
	if c.args != "" {
		synopsis += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n", synopsis, strings.TrimSpace(c.description))
	fmt.Fprint(w, "\nFlags:\n")
	printFlags(w, fs, func(name string) bool { return c.standalone || !connectionFlags[name] })
	if !c.standalone {
		fmt.Fprint(w, "\nConnection flags:\n")
		printFlags(w, fs, func(name string) bool { return connectionFlags[name] })
	}
	fmt.Fprintf(w, "\nExample:\n%s\n", indent(strings.TrimSpace(c.example), "  "))
	fmt.Fprint(w, "\n"+exitCodesHelp)
}

// printFlags lists the flags that include selects, in --name form, aligned.
func printFlags(w io.Writer, fs *flag.FlagSet, include func(string) bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if !include(f.Name) {
			return
		}
		typ, text := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if typ != "" {
			left += " " + typ
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "-1" && f.DefValue != "0s" {
			text += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", left, text)
	})
	tw.Flush()
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
