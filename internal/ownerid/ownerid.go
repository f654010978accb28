// Package ownerid names lease owners the way the deployed functions do, for
// lambda/wiring and for the simulator (internal/harness/sim), which must give its
// relays the ids the relay function's containers get.
package ownerid

import (
	"fmt"
	"os"
)

// Stream is the lease owner id of the relay function: one name for
// all of its execution environments, "relay/<function name>", so that
// metrics and heartbeats name the function. The name does not make them one
// holder: the event-source mapping does not serialise a bucket (AWS orders
// stream records per item, so two hints of one bucket can reach concurrent
// invocations), and each acquisition is its own hold, told apart by the
// token in the lease item. A container resumes without a write only a
// bucket it released itself; one that takes a bucket from another
// container's release waits ResumeWindow (docs/design.md §4.3). Outside
// Lambda it is Container("relay").
func Stream() string {
	if fn := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); fn != "" {
		id := "relay/" + fn
		if len(id) > 128 {
			id = id[:128]
		}
		return id
	}
	return Container("relay")
}

// Container names this execution environment: the log stream is unique per
// Lambda container; elsewhere the host name and pid.
func Container(function string) string {
	if s := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME"); s != "" {
		id := function + "/" + s
		if len(id) > 128 {
			id = id[len(id)-128:]
		}
		return id
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s-%d", function, host, os.Getpid())
}
