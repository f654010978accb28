package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/dynakafka/outbox"
)

// Kind is a kind of injected fault.
type Kind int

// The fault kinds. See the package documentation for how each is produced.
const (
	// Throttle: ProvisionedThroughputExceededException (HTTP 400), nothing
	// executed.
	Throttle Kind = iota
	// Throttling: ThrottlingException (HTTP 400), nothing executed.
	Throttling
	// ServerError: InternalServerError (HTTP 500), nothing executed.
	ServerError
	// Timeout: the request is not sent; a transport timeout error.
	Timeout
	// ResponseLost: the request executes; its response is replaced by a
	// transport timeout error.
	ResponseLost
	// Unprocessed: BatchWriteItem executes a proper subset of its requests
	// and returns the rest in UnprocessedItems.
	Unprocessed

	numKinds
)

// Kinds lists every kind, in order.
var Kinds = []Kind{Throttle, Throttling, ServerError, Timeout, ResponseLost, Unprocessed}

var kindNames = [...]string{"throttle", "throttling", "server-error", "timeout", "response-lost", "unprocessed"}

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Policy says how often each fault is injected into one operation.
// Probabilities are per attempt (Throttle, Throttling, ServerError, Timeout,
// ResponseLost: at most one per attempt, so they may add up to at most 1)
// or per call (Unprocessed, BatchWriteItem only). The zero Policy injects
// nothing.
type Policy struct {
	Throttle     float64
	Throttling   float64
	ServerError  float64
	Timeout      float64
	ResponseLost float64
	Unprocessed  float64
	// Limit caps the faults injected into the operation over the
	// injector's life (0: no cap). With probability 1 and Limit n, exactly
	// the first n attempts fail: handy for deterministic tests.
	Limit int
}

func (p Policy) prob(k Kind) float64 {
	return [...]float64{p.Throttle, p.Throttling, p.ServerError, p.Timeout, p.ResponseLost, p.Unprocessed}[k]
}

// attemptKinds are drawn once per attempt, in this order.
var attemptKinds = []Kind{Throttle, Throttling, ServerError, Timeout, ResponseLost}

// AllOperations, given to For, sets the policy of every operation that has
// no policy of its own.
const AllOperations = "*"

// Fault is one injected fault, as reported to the OnFault hook.
type Fault struct {
	Kind      Kind
	Operation string
	// Status is the HTTP status of the response a ResponseLost fault
	// discarded (0 for other kinds).
	Status int
	// Unprocessed is how many write requests an Unprocessed fault held
	// back, of Requests in the call.
	Unprocessed, Requests int
	// Input is the call's input as the caller passed it (for example a
	// *dynamodb.TransactWriteItemsInput), to attribute the fault's effects
	// to items. Do not modify it.
	Input any
}

// Key names a counter: a kind of fault in one operation.
type Key struct {
	Kind      Kind
	Operation string
}

// Option configures an Injector.
type Option func(*config)

type config struct {
	seed     uint64
	policies map[string]Policy
	disabled bool
	onFault  func(Fault)
}

// Seed seeds the random decisions. Default 1.
func Seed(s uint64) Option { return func(c *config) { c.seed = s } }

// For sets the policy for the DynamoDB operation op (a method name of
// *dynamodb.Client, such as "PutItem"), or for every operation without a
// policy of its own when op is AllOperations. Default: no policy, no faults.
func For(op string, p Policy) Option {
	return func(c *config) { c.policies[op] = p }
}

// Disabled makes the injector start switched off (Enable turns it on).
// Default: on.
func Disabled() Option { return func(c *config) { c.disabled = true } }

// OnFault calls fn, synchronously, for every injected fault (from the
// goroutine of the call it affects). Default: none.
func OnFault(fn func(Fault)) Option { return func(c *config) { c.onFault = fn } }

// Injector injects faults into the DynamoDB clients it is installed in. It
// is safe for concurrent use and may be shared by many clients.
type Injector struct {
	policies map[string]Policy
	onFault  func(Fault)
	enabled  atomic.Bool

	mu       sync.Mutex
	rng      *rand.Rand
	injected map[string]int // per operation, for Policy.Limit
	counts   map[Key]int64
}

// New returns an injector. A policy with a probability outside 0..1,
// per-attempt probabilities adding up to more than 1, a negative Limit, an
// operation that is not a DynamoDB client method, or Unprocessed on an
// operation other than BatchWriteItem is an *outbox.OptionError.
func New(opts ...Option) (*Injector, error) {
	c := config{seed: 1, policies: map[string]Policy{}}
	for _, o := range opts {
		o(&c)
	}
	for op, p := range c.policies {
		if err := validate(op, p); err != nil {
			return nil, err
		}
	}
	i := &Injector{
		policies: c.policies,
		onFault:  c.onFault,
		rng:      rand.New(rand.NewPCG(c.seed, c.seed^0x9e3779b97f4a7c15)),
		injected: map[string]int{},
		counts:   map[Key]int64{},
	}
	i.enabled.Store(!c.disabled)
	return i, nil
}

var clientType = reflect.TypeFor[*dynamodb.Client]()

func validate(op string, p Policy) error {
	field := func(name string) string { return fmt.Sprintf("For(%q).%s", op, name) }
	if op != AllOperations {
		m, ok := clientType.MethodByName(op)
		if !ok || m.Type.NumIn() < 3 || !strings.HasSuffix(m.Type.In(2).String(), "Input") {
			return &outbox.OptionError{Option: fmt.Sprintf("For(%q)", op), Value: op,
				Reason: `not a DynamoDB operation; use a *dynamodb.Client method name such as "PutItem", or faults.AllOperations`}
		}
	}
	sum := 0.0
	for _, k := range Kinds {
		v := p.prob(k)
		if !(v >= 0 && v <= 1) {
			return &outbox.OptionError{Option: field(fieldName(k)), Value: v, Reason: "a probability must be in 0..1"}
		}
		if k != Unprocessed {
			sum += v
		}
	}
	if sum > 1+1e-9 {
		return &outbox.OptionError{Option: field("Throttle+Throttling+ServerError+Timeout+ResponseLost"), Value: sum,
			Reason: "at most one of these faults happens per attempt, so their probabilities must add up to at most 1"}
	}
	if p.Unprocessed > 0 && op != AllOperations && op != "BatchWriteItem" {
		return &outbox.OptionError{Option: field("Unprocessed"), Value: p.Unprocessed,
			Reason: "only BatchWriteItem returns unprocessed items; set it on For(\"BatchWriteItem\", ...)"}
	}
	if p.Limit < 0 {
		return &outbox.OptionError{Option: field("Limit"), Value: p.Limit, Reason: "must be 0 (no limit) or positive"}
	}
	return nil
}

func fieldName(k Kind) string {
	return [...]string{"Throttle", "Throttling", "ServerError", "Timeout", "ResponseLost", "Unprocessed"}[k]
}

// Enable switches injection on.
func (i *Injector) Enable() { i.enabled.Store(true) }

// Disable switches injection off: calls in flight finish as decided, new
// attempts run untouched. Counters keep their values.
func (i *Injector) Disable() { i.enabled.Store(false) }

// Enabled reports whether injection is on.
func (i *Injector) Enabled() bool { return i.enabled.Load() }

// Count returns how many faults of kind k were injected into operation op,
// or into all operations when op is "".
func (i *Injector) Count(k Kind, op string) int64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	var n int64
	for key, c := range i.counts {
		if key.Kind == k && (op == "" || key.Operation == op) {
			n += c
		}
	}
	return n
}

// Total returns how many faults were injected, of every kind.
func (i *Injector) Total() int64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	var n int64
	for _, c := range i.counts {
		n += c
	}
	return n
}

// Counts returns a copy of every non-zero counter.
func (i *Injector) Counts() map[Key]int64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make(map[Key]int64, len(i.counts))
	for k, c := range i.counts {
		out[k] = c
	}
	return out
}

// String summarizes the counters: "throttle=3 timeout=1 ..." per kind, all
// kinds listed.
func (i *Injector) String() string {
	var b strings.Builder
	for n, k := range Kinds {
		if n > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, i.Count(k, ""))
	}
	return b.String()
}

// Install adds the injector's middleware to a DynamoDB client's options:
// dynamodb.NewFromConfig(cfg, inj.Install).
func (i *Injector) Install(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, i.AddMiddleware)
}

// NoRetries makes a DynamoDB client try every call once: the SDK's retryer
// then hands every fault, injected or real, straight to the caller.
func NoRetries(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

// Middleware IDs, as they appear in the stack.
const (
	TransportID   = "faults.Transport"
	UnprocessedID = "faults.Unprocessed"
	InputID       = "faults.Input"
)

// AddMiddleware adds the injector to one operation's stack (an entry for
// dynamodb.Options.APIOptions). Operations without a policy get nothing.
func (i *Injector) AddMiddleware(stack *middleware.Stack) error {
	op := stack.ID()
	p, ok := i.policy(op)
	if !ok {
		return nil
	}
	if p.Unprocessed > 0 && op == "BatchWriteItem" {
		if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc(UnprocessedID, i.unprocessed), middleware.After); err != nil {
			return err
		}
	}
	for _, k := range attemptKinds {
		if p.prob(k) > 0 {
			// Remember the input for Fault.Input: the deserialize step
			// sees only the HTTP request.
			err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc(InputID,
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					return next.HandleInitialize(middleware.WithStackValue(ctx, inputKey{}, in.Parameters), in)
				}), middleware.Before)
			if err != nil {
				return err
			}
			// After every other deserialize middleware: innermost, around
			// the HTTP round trip, inside the retry loop.
			return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc(TransportID,
				func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
					return i.transport(ctx, op, in, next)
				}), middleware.After)
		}
	}
	return nil
}

type inputKey struct{}

func (i *Injector) policy(op string) (Policy, bool) {
	if p, ok := i.policies[op]; ok {
		return p, true
	}
	p, ok := i.policies[AllOperations]
	return p, ok
}

// draw decides whether one of kinds fires for op, and counts it.
func (i *Injector) draw(op string, kinds ...Kind) (Kind, bool) {
	if !i.enabled.Load() {
		return 0, false
	}
	p, ok := i.policy(op)
	if !ok {
		return 0, false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if p.Limit > 0 && i.injected[op] >= p.Limit {
		return 0, false
	}
	x := i.rng.Float64()
	for _, k := range kinds {
		pk := p.prob(k)
		if x < pk {
			i.injected[op]++
			i.counts[Key{k, op}]++
			return k, true
		}
		x -= pk
	}
	return 0, false
}

// rand returns a random integer in 0..n-1.
func (i *Injector) randN(n int) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.rng.IntN(n)
}

func (i *Injector) report(f Fault) {
	if i.onFault != nil {
		i.onFault(f)
	}
}

// sortedKeys is for deterministic iteration over a map of tables.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
