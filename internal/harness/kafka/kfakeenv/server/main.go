// Command server runs a kfake cluster in a process of its own, for the
// tests of the library's module, which may not require kfake (a service that
// imports the library would get it in its module graph): internal/harness/testenv
// builds and starts it. It prints "kfake-server: listening <brokers>" (comma
// separated) on its standard output and exits when its standard input
// closes, so that it never outlives the test binary that started it.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	brokers := flag.Int("brokers", 3, "number of brokers")
	flag.Parse()
	if *brokers < 1 {
		log.Fatalf("kfake-server: -brokers %d: want at least 1", *brokers)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(*brokers))
	if err != nil {
		log.Fatalf("kfake-server: %v", err)
	}
	fmt.Printf("kfake-server: listening %s\n", strings.Join(c.ListenAddrs(), ","))
	io.Copy(io.Discard, os.Stdin) // until the test binary closes it, or dies
	c.Close()
}
