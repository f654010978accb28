package dynamolocal

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// installerPath is the installer's path relative to the repository root.
const installerPath = "scripts/install-dynamodb-local.sh"

// install runs the installer script (a fast no-op once installed) and returns
// the directory it prints.
func install(ctx context.Context, script string) (string, error) {
	if script == "" {
		var err error
		if script, err = findInstaller(); err != nil {
			return "", err
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second // npm may outlive a cancelled bash
	if err := cmd.Run(); err != nil {
		return "", &StartError{Op: "install", Err: fmt.Errorf("%s: %w", script, err), Output: stderr.String()}
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" {
		return "", &StartError{Op: "install", Err: fmt.Errorf("%s printed no directory", script), Output: stderr.String()}
	}
	return dir, nil
}

// findInstaller looks for the script above the working directory (go test
// runs in the package directory; the demo in the repository), then relative
// to this source file (a binary built from this checkout, run elsewhere).
func findInstaller() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, filepath.FromSlash(installerPath))
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", &OptionError{Field: "Installer", Reason: fmt.Sprintf(
		"cannot find %s above the working directory; run from the repository, or set Options.Dir or %s to the directory holding %s",
		installerPath, DirEnv, jarName)}
}
