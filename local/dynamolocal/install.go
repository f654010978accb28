package dynamolocal

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/dynakafka/outbox/internal/proc"
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

// findInstaller looks for the script above the working directory, then
// above this checkout's source (proc.FindUp).
func findInstaller() (string, error) {
	if p, err := proc.FindUp(installerPath); err == nil {
		return p, nil
	}
	return "", &OptionError{Field: "Installer", Reason: fmt.Sprintf(
		"cannot find %s above the working directory; run from the repository, or set Options.Dir or %s to the directory holding %s",
		installerPath, DirEnv, jarName)}
}
