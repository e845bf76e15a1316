// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ModuleMain is `fulfiller module check DIR|SOURCE`: the class's static contract check
// (CheckModuleDir) for module authors and CI. A SOURCE that is no folder is fetched as a class
// fetches it (FetchModule: `tofu get`, the tofu of --tofu or on PATH) and its files are
// checked. It prints every violation with its file and line and returns 1 on any (or when the
// source cannot be fetched), 0 when the module keeps the contract and 2 for a usage error.
func ModuleMain(args []string, stdout, stderr io.Writer) int {
	const usage = "usage: fulfiller module check [--tofu PATH] DIR|SOURCE\n\n" +
		"check that the module in DIR, or at a module source OpenTofu accepts (git::https://...,\n" +
		"an HTTP archive), keeps the module contract (modules/README.md): every violation is\n" +
		"printed with its file and line, and the exit code is 1 on any\n"
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("module check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	tofu := fs.String("tofu", "tofu", "the tofu binary that fetches a SOURCE")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	arg := fs.Arg(0)
	dir, name := filepath.Clean(arg), filepath.Clean(arg)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		if IsLocalSource(arg) || strings.HasPrefix(arg, ".") {
			fmt.Fprintf(stderr, "fulfiller module check: %s is not a folder\n", arg)
			return 2
		}
		fetched, cleanup, err := fetchForCheck(arg, *tofu)
		defer cleanup()
		if err != nil {
			fmt.Fprintf(stderr, "fulfiller module check: %v\n", err)
			return 1
		}
		dir, name = fetched.Dir, arg
		fmt.Fprintf(stderr, "%s: fetched %s%s\n", arg, fetched.Digest, commitNote(fetched.Commit))
	}
	violations, err := CheckModuleDir(dir)
	if err != nil {
		fmt.Fprintf(stderr, "fulfiller module check: %v\n", err)
		return 1
	}
	for _, v := range violations {
		switch {
		case v.File == "":
			fmt.Fprintf(stdout, "%s: %s\n", name, v.Message)
		case name != dir: // a fetched source: its files by their path in the source
			fmt.Fprintf(stdout, "%s: %s\n", name, v.String())
		default:
			fmt.Fprintln(stdout, filepath.Join(dir, v.String()))
		}
	}
	if len(violations) > 0 {
		fmt.Fprintf(stderr, "%s: %d violation(s) of the module contract\n", name, len(violations))
		return 1
	}
	fmt.Fprintf(stdout, "%s: keeps the module contract\n", name)
	return 0
}

// fetchForCheck fetches a source into a temporary folder, which cleanup removes.
func fetchForCheck(source, tofu string) (*ResolvedModule, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	got, work, err := FetchRemoteModule(ctx, tofu, source, os.TempDir(), nil)
	if err != nil {
		return nil, func() {}, err
	}
	return got, func() { _ = os.RemoveAll(work) }, nil
}
