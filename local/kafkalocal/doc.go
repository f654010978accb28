// Package kafkalocal runs a real Apache Kafka cluster (KRaft, one or three
// nodes) on loopback, for `outbox local --real` and for the tests that need
// a real broker (internal/harness/testenv.RealKafka wraps it).
//
// Start installs the broker on first use (through scripts/install-kafka.sh,
// from Maven Central; Java 17+ and Maven), starts the nodes on free ports
// and waits until every one is listed:
//
//	c, err := kafkalocal.Start(ctx, 1)
//	if err != nil { ... } // the message says what to install
//	defer c.Stop()
//	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Plain...))
//
// Each node runs in its own process group and is killed with it by Stop; on
// Linux it is also killed when the starting process dies, as with
// local/dynamolocal.
package kafkalocal
