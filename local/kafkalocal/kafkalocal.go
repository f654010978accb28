package kafkalocal

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox/internal/proc"
)

// kafkaInstaller is the broker installer's path relative to the repository.
const kafkaInstaller = "scripts/install-kafka.sh"

// Cluster is an Apache Kafka KRaft cluster on loopback, every node both
// broker and controller, started by Start. Each node listens on PLAINTEXT
// (no authentication: the principal User:ANONYMOUS, a super user),
// SASL_PLAINTEXT with SCRAM-SHA-256 and SCRAM-SHA-512 (users made with
// AddSCRAMUser; ACLs apply to them), and SSL (a server certificate signed by
// CA, made at start). Authorization is the StandardAuthorizer with
// allow.everyone.if.no.acl.found: a resource is open until an ACL names it.
type Cluster struct {
	Version string // the broker's version, e.g. "4.4.0"
	Nodes   int
	// Plain, SASL and TLS are the nodes' addresses on each listener.
	Plain, SASL, TLS []string
	// CA signed the brokers' certificate: trust it on the TLS listener.
	CA *x509.CertPool
	// Libs is the directory of the broker's jars (kafka-clients among them),
	// for tests that run Java against the same client library.
	Libs string
	// Java is the java executable the brokers run on.
	Java string

	dir   string
	mu    sync.Mutex
	procs []*brokerProc
}

// brokerProc is a started broker (internal/proc, shared with
// local/dynamolocal: its own process group, killed whole; on Linux a parent
// death signal, so no broker outlives the process that started it).
type brokerProc = proc.Process

// Start starts a new cluster of nodes nodes (1, or 3 to replicate
// everything three times with min.insync.replicas 2, so that it survives
// one stopped node), installing Apache Kafka first if needed (through
// scripts/install-kafka.sh, from Maven Central; Java 17+ and Maven); ctx
// bounds the start. The caller stops it with Stop.
func Start(ctx context.Context, nodes int) (*Cluster, error) {
	if nodes < 1 {
		return nil, fmt.Errorf("kafkalocal.Start: %d nodes; want at least 1", nodes)
	}
	return start(ctx, nodes)
}

// Stop kills the cluster's nodes and removes their data.
func (c *Cluster) Stop() { c.stop() }

// TLSConfig returns a client TLS configuration that trusts the brokers.
func (c *Cluster) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: c.CA, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// AddSCRAMUser creates (or updates) a SCRAM-SHA-256 and SCRAM-SHA-512 user.
func (c *Cluster) AddSCRAMUser(ctx context.Context, user, password string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Plain...))
	if err != nil {
		return err
	}
	defer cl.Close()
	// One user per request: the broker refuses a request naming it twice.
	for _, m := range []struct {
		mech int8 // 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (KIP-554)
		hash func() hash.Hash
		size int
	}{{1, sha256.New, sha256.Size}, {2, sha512.New, sha512.Size}} {
		salt := make([]byte, 24)
		rand.Read(salt)
		salted, err := pbkdf2.Key(m.hash, password, salt, 4096, m.size)
		if err != nil {
			return err
		}
		req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
		up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = user, m.mech, 4096, salt, salted
		req.Upsertions = append(req.Upsertions, up)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			for _, r := range resp.Results {
				if err = kerr.ErrorForCode(r.ErrorCode); err != nil {
					break
				}
			}
		}
		if err != nil {
			return fmt.Errorf("add SCRAM user %s (mechanism %d): %w", user, m.mech, err)
		}
	}
	return nil
}

// StopBroker kills node i (0-based) at once (SIGKILL, no controlled
// shutdown), as a crash would, and waits until it has exited.
func (c *Cluster) StopBroker(i int) {
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// StartBroker starts node i again on its ports and data, after StopBroker,
// and waits until the cluster's metadata lists every node again.
func (c *Cluster) StartBroker(ctx context.Context, i int) error {
	c.mu.Lock()
	running := c.procs[i] != nil
	c.mu.Unlock()
	if running {
		return fmt.Errorf("node %d is running", i)
	}
	p, err := c.launch(i)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs[i] = p
	c.mu.Unlock()
	return c.waitReady(ctx)
}

func (c *Cluster) stop() {
	c.mu.Lock()
	procs := c.procs
	c.procs = make([]*brokerProc, len(procs))
	c.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			p.Kill()
		}
	}
	_ = os.RemoveAll(c.dir)
}

func start(ctx context.Context, nodes int) (*Cluster, error) {
	home, err := installKafka(ctx)
	if err != nil {
		return nil, err
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("java not found (%v): Apache Kafka needs Java 17 or newer; install one, e.g. 'apt-get install openjdk-17-jre-headless'", err)
	}
	version, err := os.ReadFile(filepath.Join(home, "VERSION"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (run %s again)", home, err, kafkaInstaller)
	}
	// A port picked free may be taken by another process before java binds
	// it: start over on new ports a few times.
	for attempt := 1; ; attempt++ {
		c, err := startCluster(ctx, nodes, home, java, strings.TrimSpace(string(version)))
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "BindException") {
			return c, err
		}
	}
}

func startCluster(ctx context.Context, nodes int, home, java, version string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "outbox-kafka-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Version: version, Nodes: nodes, Libs: filepath.Join(home, "libs"), Java: java, dir: dir, procs: make([]*brokerProc, nodes)}
	fail := func(err error) (*Cluster, error) {
		c.stop()
		return nil, err
	}
	ca, keystore, err := makeCerts()
	if err != nil {
		return fail(fmt.Errorf("make TLS certificates: %w", err))
	}
	c.CA = x509.NewCertPool()
	c.CA.AddCert(ca)
	ksPath := filepath.Join(dir, "keystore.pem")
	if err := os.WriteFile(ksPath, keystore, 0o600); err != nil {
		return fail(err)
	}
	ports := make([][4]int, nodes) // plain, sasl, tls, controller
	for i := range ports {
		for j := range ports[i] {
			if ports[i][j], err = loopbackPort(); err != nil {
				return fail(err)
			}
		}
	}
	var voters []string
	for i := range nodes {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, ports[i][3]))
		c.Plain = append(c.Plain, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i][0])))
		c.SASL = append(c.SASL, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i][1])))
		c.TLS = append(c.TLS, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i][2])))
	}
	clusterID := clusterID()
	minISR := 1
	if nodes >= 3 {
		minISR = 2
	}
	log4j := filepath.Join(dir, "log4j2.properties")
	if err := os.WriteFile(log4j, []byte(log4jConfig), 0o644); err != nil {
		return fail(err)
	}
	for i := range nodes {
		nodeDir := filepath.Join(dir, fmt.Sprint("node-", i+1))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return fail(err)
		}
		p := ports[i]
		props := fmt.Sprintf(serverProperties, i+1, strings.Join(voters, ","),
			p[0], p[1], p[2], p[3], p[0], p[1], p[2],
			ksPath, filepath.Join(nodeDir, "data"), nodes, nodes, minISR, nodes, minISR)
		if err := os.WriteFile(filepath.Join(nodeDir, "server.properties"), []byte(props), 0o644); err != nil {
			return fail(err)
		}
		// Format the node's storage (KRaft needs it before the first start).
		format := exec.CommandContext(ctx, java, append(c.jvmArgs(log4j, "96m"), "kafka.tools.StorageTool",
			"format", "--cluster-id", clusterID, "--config", filepath.Join(nodeDir, "server.properties"), "--ignore-formatted")...)
		if out, err := format.CombinedOutput(); err != nil {
			return fail(fmt.Errorf("format node %d storage: %v: %s", i+1, err, proc.Tail(out)))
		}
	}
	for i := range nodes {
		p, err := c.launch(i)
		if err != nil {
			return fail(err)
		}
		c.procs[i] = p
	}
	if err := c.waitReady(ctx); err != nil {
		return fail(err)
	}
	return c, nil
}

// jvmArgs keeps each node small: it must fit 2 cores beside DynamoDB Local
// and the tests. C1 only (TieredStopAtLevel=1) starts faster and compiles
// less; the serial collector needs no GC threads.
func (c *Cluster) jvmArgs(log4j, heap string) []string {
	return []string{"-Xms64m", "-Xmx" + heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"-Djava.awt.headless=true", "-Dlog4j2.configurationFile=" + log4j, "-cp", filepath.Join(c.Libs, "*")}
}

func (c *Cluster) launch(i int) (*brokerProc, error) {
	nodeDir := filepath.Join(c.dir, fmt.Sprint("node-", i+1))
	out, err := os.OpenFile(filepath.Join(nodeDir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.Java, append(c.jvmArgs(filepath.Join(c.dir, "log4j2.properties"), "320m"),
		"kafka.Kafka", filepath.Join(nodeDir, "server.properties"))...)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := proc.Launch(cmd)
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("start node %d: %w", i+1, err)
	}
	go func() {
		<-p.Exited
		out.Close()
	}()
	return p, nil
}

// waitReady waits until every running node is in the metadata and answers.
func (c *Cluster) waitReady(ctx context.Context) error {
	c.mu.Lock()
	var want []string
	var procs []*brokerProc
	for i, p := range c.procs {
		if p != nil {
			want = append(want, c.Plain[i])
			procs = append(procs, p)
		}
	}
	c.mu.Unlock()
	var last error
	for {
		// A new client each time: a client's metadata may be cached from
		// before every node had registered.
		n, err := brokersListed(ctx, want)
		if err == nil && n == len(want) {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("metadata lists %d of %d nodes", n, len(want))
		}
		for i, p := range procs {
			select {
			case <-p.Exited:
				return fmt.Errorf("a Kafka node exited before the cluster was ready: %v\n--- output ---\n%s", p.Err, c.consoleTail(i))
			default:
			}
		}
		select {
		case <-ctx.Done():
			var tails strings.Builder
			for i := range c.Nodes {
				fmt.Fprintf(&tails, "\n--- node %d output ---\n%s", i+1, c.consoleTail(i))
			}
			return fmt.Errorf("the Kafka cluster at %s was not ready: %v (last: %v)%s", strings.Join(want, ","), ctx.Err(), last, tails.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// brokersListed asks each of brokers for the cluster's metadata and returns
// the fewest brokers any of them lists.
func brokersListed(ctx context.Context, brokers []string) (int, error) {
	fewest := len(brokers)
	for _, b := range brokers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b), kgo.RetryTimeout(time.Second))
		if err != nil {
			return 0, err
		}
		probe, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(probe, cl)
		cancel()
		cl.Close()
		if err != nil {
			return 0, fmt.Errorf("metadata from %s: %w", b, err)
		}
		fewest = min(fewest, len(resp.Brokers))
	}
	return fewest, nil
}

func (c *Cluster) consoleTail(i int) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprint("node-", i+1), "console.log"))
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

// installKafka runs scripts/install-kafka.sh (a fast no-op once installed)
// and returns the directory it prints.
func installKafka(ctx context.Context) (string, error) {
	script, err := findUp(kafkaInstaller)
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("install Apache Kafka: %s: %v\n--- output ---\n%s", script, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// findUp looks for rel above the working directory, then above this
// checkout's source (proc.FindUp).
func findUp(rel string) (string, error) {
	p, err := proc.FindUp(rel)
	if err != nil {
		return "", errors.New("cannot find " + rel + " above the working directory; run from the repository")
	}
	return p, nil
}

func loopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// clusterID is a random KRaft cluster id: 16 bytes, base64url, no padding.
// An id that starts with '-' (one in 64) is drawn again, as Kafka's own
// Uuid.randomUuid does: kafka-storage's argument parser reads
// "--cluster-id -x..." as a missing value followed by an option.
func clusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// makeCerts makes a CA and a server certificate for 127.0.0.1 and localhost
// signed by it, and returns the CA and the broker's PEM keystore (the
// unencrypted PKCS#8 key, then the certificate chain).
func makeCerts() (*x509.Certificate, []byte, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outbox test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	var ks bytes.Buffer
	_ = pem.Encode(&ks, &pem.Block{Type: "PRIVATE KEY", Bytes: pk})
	_ = pem.Encode(&ks, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = pem.Encode(&ks, &pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return ca, ks.Bytes(), nil
}

// serverProperties is one combined broker+controller node. Short session
// and heartbeat times: a stopped node is fenced (and leaves the ISRs) within
// seconds, not the default 9 s.
const serverProperties = `process.roles=broker,controller
node.id=%d
controller.quorum.voters=%s
listeners=PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d,SSL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d
advertised.listeners=PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d,SSL://127.0.0.1:%d
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=%s
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=true
log.dirs=%s
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=%d
offsets.topic.replication.factor=%d
offsets.topic.num.partitions=4
min.insync.replicas=%d
transaction.state.log.replication.factor=%d
transaction.state.log.min.isr=%d
transaction.state.log.num.partitions=4
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
group.initial.rebalance.delay.ms=0
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=500
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
background.threads=2
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=2097152
log.segment.bytes=16777216
`

// log4jConfig: warnings and errors to the console (the node's console.log).
const log4jConfig = `status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRefs = stdout
rootLogger.appenderRef.stdout.ref = STDOUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.ctl.name = org.apache.kafka.controller
logger.ctl.level = INFO
`
