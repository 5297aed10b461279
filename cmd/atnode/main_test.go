package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// atnodeBin is the atnode binary that TestMain builds for the subprocess
// tests.
var atnodeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "atnode-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	atnodeBin = filepath.Join(dir, "atnode")
	build := exec.Command("go", "build", "-o", atnodeBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	code := 1
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building atnode:", err)
	} else {
		code = m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
