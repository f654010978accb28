package dynamolocal

import "github.com/dynakafka/outbox/internal/proc"

// process is the started java (internal/proc, shared with internal/harness/testenv's
// Kafka brokers: its own process group, a parent death signal on Linux).
type process = proc.Process

var launch = proc.Launch
