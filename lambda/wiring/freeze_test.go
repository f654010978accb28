package wiring

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// freezer is a TCP proxy in front of an endpoint that can stop answering:
// once frozen, it forwards nothing in either direction (connections stay
// open), as a DynamoDB that accepts requests and never answers.
type freezer struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	held   atomic.Int64 // reads held back while frozen: a caller met the fault
	done   chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
}

// newFreezer proxies endpoint (an http URL) and returns the proxy's URL.
func newFreezer(t *testing.T, endpoint string) (*freezer, string) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: u.Host, done: make(chan struct{})}
	go f.serve()
	t.Cleanup(f.close)
	return f, "http://" + ln.Addr().String()
}

func (f *freezer) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, u)
		f.mu.Unlock()
		go f.pipe(u, c)
		go f.pipe(c, u)
	}
}

// pipe copies src to dst, holding what it read while frozen.
func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if f.frozen.Load() && n > 0 {
			f.held.Add(1)
		}
		for f.frozen.Load() {
			select {
			case <-f.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (f *freezer) close() {
	close(f.done)
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}
