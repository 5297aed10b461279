package main

import (
	"fmt"
	goruntime "runtime"
	"runtime/debug"
	"strings"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
)

// keygen prints a new gossip key: one line of a -secret-key-file.
func (a app) keygen(args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(a.stderr, "atnode keygen: takes no arguments, got %q\nUsage: atnode keygen > cluster.key\n", args)
		return 2
	}
	key, err := cluster.GenerateKey()
	if err != nil {
		fmt.Fprintf(a.stderr, "atnode keygen: %v\n", err)
		return 1
	}
	fmt.Fprintln(a.stdout, key)
	return 0
}

// version prints the build's version line.
func (a app) version(args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(a.stderr, "atnode version: takes no arguments, got %q\n", args)
		return 2
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprintln(a.stdout, versionLine(bi, ok))
	return 0
}

// versionLine formats build information as
// "atnode VERSION (revision REV, TIME, modified) GOVERSION", leaving out
// what the build does not record.
func versionLine(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "atnode (unknown version) " + goruntime.Version()
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var vcs []string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			vcs = append([]string{"revision " + s.Value}, vcs...)
		case "vcs.time":
			vcs = append(vcs, s.Value)
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified {
		vcs = append(vcs, "modified")
	}
	line := "atnode " + v
	if len(vcs) > 0 {
		line += " (" + strings.Join(vcs, ", ") + ")"
	}
	return line + " " + bi.GoVersion
}
