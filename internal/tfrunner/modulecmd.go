// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ModuleMain is `fulfiller module check DIR`: the class's static contract check
// (CheckModuleDir) for module authors and CI. It prints every violation with its file and
// line and returns 1 on any, 0 when the module keeps the contract and 2 for a usage error.
func ModuleMain(args []string, stdout, stderr io.Writer) int {
	const usage = "usage: fulfiller module check DIR\n\n" +
		"check that the module in DIR keeps the module contract (modules/README.md): every\n" +
		"violation is printed with its file and line, and the exit code is 1 on any\n"
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("module check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	dir := filepath.Clean(fs.Arg(0))
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		fmt.Fprintf(stderr, "fulfiller module check: %s is not a folder (only a local module folder can be checked)\n", dir)
		return 2
	}
	violations, err := CheckModuleDir(dir)
	if err != nil {
		fmt.Fprintf(stderr, "fulfiller module check: %v\n", err)
		return 1
	}
	for _, v := range violations {
		if v.File == "" {
			fmt.Fprintf(stdout, "%s: %s\n", dir, v.Message)
		} else {
			fmt.Fprintln(stdout, filepath.Join(dir, v.String()))
		}
	}
	if len(violations) > 0 {
		fmt.Fprintf(stderr, "%s: %d violation(s) of the module contract\n", dir, len(violations))
		return 1
	}
	fmt.Fprintf(stdout, "%s: keeps the module contract\n", dir)
	return 0
}
