// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	var got []string
	sim := Command{Name: "sim", Summary: "simulate", Run: func(args []string) int {
		got = args
		return 3
	}}
	cmds := commands("v1", nil, []Command{sim})
	if names := commandNames(cmds); !slices.Equal(names, []string{"controller", "run", "module", "logs", "robot", "sim", "version"}) {
		t.Fatalf("commands = %v, want controller, run, module, logs, robot, the extra ones, version", names)
	}
	for _, tc := range []struct {
		args               []string
		code               int
		stdout, stderr     string
		wantArgsOfExtraCmd []string
	}{
		{args: nil, code: 2, stderr: "usage: bin <command> [flags]\n\ncommands:\n  controller"},
		{args: []string{"sim", "start", "--name", "x"}, code: 3, wantArgsOfExtraCmd: []string{"start", "--name", "x"}},
		{args: []string{"dev", "up"}, code: 2, stderr: `bin: unknown command "dev"`},
		{args: []string{"--help"}, code: 0, stdout: "  sim          simulate\n  version      print the versions"},
	} {
		got = nil
		var stdout, stderr bytes.Buffer
		code := dispatch("bin", cmds, tc.args, &stdout, &stderr)
		if code != tc.code {
			t.Errorf("%v: exit code %d, want %d", tc.args, code, tc.code)
		}
		if !strings.Contains(stdout.String(), tc.stdout) || (tc.stdout == "") != (stdout.Len() == 0) {
			t.Errorf("%v: stdout %q, want it to contain %q", tc.args, stdout.String(), tc.stdout)
		}
		if !strings.Contains(stderr.String(), tc.stderr) || (tc.stderr == "") != (stderr.Len() == 0) {
			t.Errorf("%v: stderr %q, want it to contain %q", tc.args, stderr.String(), tc.stderr)
		}
		if !slices.Equal(got, tc.wantArgsOfExtraCmd) {
			t.Errorf("%v: the command got %q, want %q", tc.args, got, tc.wantArgsOfExtraCmd)
		}
	}
}

func commandNames(cmds []Command) []string {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name)
	}
	return names
}
