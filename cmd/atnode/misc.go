package main

import (
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"strings"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
)

const keygenUsage = `Usage: atnode keygen [-o FILE]

Makes a new gossip key: 32 random bytes, base64 (standard), one line of a
-secret-key-file. With -o, writes it to FILE, created with mode 0600 (only
the owner may read it; an existing FILE is never overwritten); without, prints
it on stdout.

Flags:
`

// keygen writes a new gossip key: one line of a -secret-key-file.
func (a app) keygen(args []string) int {
	fs := flag.NewFlagSet("atnode keygen", flag.ContinueOnError)
	out := fs.String("o", "", "`file` to create (mode 0600) with the new key, instead of printing it")
	if err := parseFlags(fs, args, keygenUsage, a.stderr); err != nil {
		return a.parseExit("keygen", err)
	}
	if fs.NArg() > 0 {
		return a.parseExit("keygen", usageError(fmt.Errorf("takes no arguments, got %q", fs.Args())))
	}
	key, err := cluster.GenerateKey()
	if err != nil {
		fmt.Fprintf(a.stderr, "atnode keygen: %v\n", err)
		return 1
	}
	if *out == "" {
		fmt.Fprintln(a.stdout, key)
		return 0
	}
	if err := writeNewFile(*out, []byte(key+"\n")); err != nil {
		fmt.Fprintf(a.stderr, "atnode keygen: %v\n", err)
		return 1
	}
	fmt.Fprintf(a.stderr, "atnode keygen: wrote a new key to %s (mode 0600)\n", *out)
	return 0
}

// writeNewFile creates path with mode 0600 (whatever the umask allows
// beyond it is not added) and writes data; it refuses to replace an
// existing file, and removes what it created when the write fails.
func writeNewFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
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
