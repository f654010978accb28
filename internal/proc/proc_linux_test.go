package proc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// alive reports whether pid is a live process (zombies count as dead: a
// container's init may never reap them).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitDead(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // do not leak it past the test
			t.Fatalf("%s (pid %d) still alive", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKillGroupTakesChildren checks that stopping kills what the engine
// started too, not just the process itself.
func TestKillGroupTakesChildren(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("sh", "-c", "sleep 60 & echo $!; wait")
	cmd.Stdout = w
	p, err := Launch(cmd)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("no child pid printed: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child pid %q: %v", line, err)
	}
	KillGroup(cmd.Process)
	select {
	case <-p.Exited:
	case <-time.After(5 * time.Second):
		t.Fatal("process not reaped after KillGroup")
	}
	waitDead(t, child, "grandchild")
}

const helperEnv = "PROC_TEST_HELPER"

// TestHelperLaunchAndHang is not a test: TestParentDeathKillsChild runs the
// test binary as a parent that launches a child, churns OS threads, reports
// the child's pid and hangs until killed.
func TestHelperLaunchAndHang(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestParentDeathKillsChild")
	}
	p, err := Launch(exec.Command("sleep", "60"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	// Goroutines that exit while locked to their OS thread make the
	// runtime terminate those threads: the parent death signal must not
	// fire because some thread of the parent went away.
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			time.Sleep(time.Millisecond)
		}()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	fmt.Println("pid", p.Cmd.Process.Pid)
	time.Sleep(time.Minute)
	os.Exit(0)
}

// TestParentDeathKillsChild checks that a launched process dies with its
// parent when the parent dies without killing it (SIGKILL here; a panic or a test
// timeout alike), and not before.
func TestParentDeathKillsChild(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^TestHelperLaunchAndHang$", "-test.timeout=2m")
	parent.Env = append(os.Environ(), helperEnv+"=1")
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })

	lines := bufio.NewScanner(stdout)
	var child int
	for child == 0 && lines.Scan() {
		if pid, ok := strings.CutPrefix(lines.Text(), "pid "); ok {
			if child, err = strconv.Atoi(pid); err != nil {
				t.Fatal(err)
			}
		} else if strings.HasPrefix(lines.Text(), "error") {
			t.Fatal(lines.Text())
		}
	}
	if child == 0 {
		t.Fatalf("helper printed no pid (scan error %v)", lines.Err())
	}
	if !alive(child) {
		t.Fatal("child died before its parent: a thread exit fired the parent death signal")
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	waitDead(t, child, "child of a killed parent")
}
