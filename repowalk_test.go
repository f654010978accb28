package outbox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// walkRepo calls fn with the path and contents of every file below the
// repository root whose name ends in one of suffixes, leaving out hidden
// directories (.git, .cache), node_modules and testdata.
func walkRepo(suffixes []string, fn func(path string, src []byte) error) error {
	return filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		for _, s := range suffixes {
			if strings.HasSuffix(path, s) {
				src, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				return fn(path, src)
			}
		}
		return nil
	})
}
