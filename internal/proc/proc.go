// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package proc answers, on Linux, whether a process recorded in a pid file is still the one
// that wrote it: the local environment, simulated machines and local runs all outlive the
// process that started them and are found again this way.
package proc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ReadPIDFile returns the pid written in path.
func ReadPIDFile(path string) (int, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// Alive reports whether pid is a running process (a zombie has exited) and, when arg is not
// empty, whether one of its arguments is arg (or ends in "="+arg), so that a pid reused by an
// unrelated process is not taken for ours.
func Alive(pid int, arg string) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may hold spaces: "pid (comm) S ...".
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	if arg == "" {
		return true
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	for _, a := range bytes.Split(cmdline, []byte{0}) {
		if string(a) == arg || strings.HasSuffix(string(a), "="+arg) {
			return true
		}
	}
	return false
}

// SessionAlive reports whether any live process belongs to session sid (a process group
// leader started with setsid and every child it left behind, such as tofu under a runner).
func SessionAlive(sid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// After "pid (comm) ": state ppid pgrp session ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			continue
		}
		fields := strings.Fields(string(stat[i+2:]))
		if len(fields) < 4 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if s, err := strconv.Atoi(fields[3]); err == nil && s == sid {
			return true
		}
	}
	return false
}

// Beside is the program name in the folder of the binary exe, when it is an executable file
// there: the project's binaries find each other this way (the runner and the simulated
// machine beside the binary that starts them).
func Beside(exe, name string) (string, bool) {
	path := filepath.Join(filepath.Dir(exe), name)
	info, err := os.Stat(path)
	return path, err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}
