// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The scenarios spend most of their time waiting (boots, Karpenter's batching and
// consolidation windows, tokens, timeouts), so the suite runs them in E2E_SHARDS (default 2)
// copies of this test binary, each with a local environment of its own: the scenarios of one
// copy see only their own control plane, as they would alone. This process lists the tests
// the -run pattern selects, deals them in source order to the copies (deal), runs them
// and streams their output, each line prefixed with its copy's number. One selected test, or
// E2E_SHARDS=1, runs here as before.

const (
	shardsEnv = "E2E_SHARDS"
	// shardEnv marks a copy (its number, from 1) so that it runs its tests itself.
	shardEnv = "E2E_SHARD"
	// devBinEnv passes the development binary built once to the copies.
	devBinEnv = "E2E_DEV_BIN"
)

// shardCount reads E2E_SHARDS: 2 when unset, 0 in a copy or when listing tests (no copies).
func shardCount() (int, error) {
	if os.Getenv(shardEnv) != "" || flagValue("test.list") != "" {
		return 0, nil
	}
	s := cmp.Or(os.Getenv(shardsEnv), "2")
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a number of environments, 1 or more", shardsEnv, s)
	}
	return n, nil
}

func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// listTests asks this binary which tests the -run pattern selects, in source order.
func listTests() ([]string, error) {
	out, err := exec.Command(os.Args[0], "-test.list", cmp.Or(flagValue("test.run"), ".")).Output()
	if err != nil {
		return nil, fmt.Errorf("listing the tests: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "Test") {
			names = append(names, line)
		}
	}
	return names, nil
}

// deal splits names into at most n groups in snake order (1 2 2 1 1 2 ...): the scenarios
// of one file, often alike in length, go to different groups, and no group is always first.
func deal(names []string, n int) [][]string {
	groups := make([][]string, min(n, len(names)))
	for i, name := range names {
		g := i % len(groups)
		if (i/len(groups))%2 == 1 {
			g = len(groups) - 1 - g
		}
		groups[g] = append(groups[g], name)
	}
	return groups
}

// runShards runs each group of tests in a copy of this binary and reports whether all passed.
func runShards(bin string, groups [][]string) int {
	args := passedFlags(os.Args[1:])
	keep := os.Getenv("E2E_KEEP_LOGS")
	if keep != "" {
		if err := os.MkdirAll(keep, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	var (
		mu   sync.Mutex // one whole line at a time on stdout
		wg   sync.WaitGroup
		code = 0
	)
	for i, group := range groups {
		shard := strconv.Itoa(i + 1)
		quoted := make([]string, len(group))
		for j, name := range group {
			quoted[j] = regexp.QuoteMeta(name)
		}
		cmd := exec.Command(os.Args[0], append(args, "-test.run=^("+strings.Join(quoted, "|")+")$")...)
		cmd.Env = append(os.Environ(), shardEnv+"="+shard, devBinEnv+"="+bin)
		if keep != "" {
			cmd.Env = append(cmd.Env, "E2E_KEEP_LOGS="+filepath.Join(keep, "shard-"+shard))
		}
		// A copy dies with this process (a -timeout panic here must not leave it running).
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		out, err := cmd.StdoutPipe()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cmd.Stderr = cmd.Stdout
		prefix := fmt.Sprintf("e2e[%s/%d] ", shard, len(groups))
		mu.Lock()
		fmt.Printf("%s%d tests: %s\n", prefix, len(group), strings.Join(group, " "))
		mu.Unlock()
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			copyLines(out, prefix, &mu)
			if err := cmd.Wait(); err != nil {
				mu.Lock()
				fmt.Printf("%sFAIL: %v\n", prefix, err)
				code = 1
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if code == 0 {
		fmt.Println("PASS")
	} else {
		fmt.Println("FAIL")
	}
	return code
}

// passedFlags drops from the arguments go test gave this binary -test.run and -test.list,
// which a copy gets of its own, and -test.testlogfile, which copies writing at once would
// garble (it only serves go test's result cache). The rest (-test.v, -test.count, ...) go to
// every copy, with a -test.timeout a minute shorter than this process's, so that a copy that
// runs out of time prints its goroutines here before this process gives up on it.
func passedFlags(args []string) []string {
	var kept []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		switch name {
		case "test.run", "test.list", "test.testlogfile", "test.timeout":
			if !hasValue {
				i++ // the value is the next argument
			}
			continue
		}
		kept = append(kept, args[i])
	}
	if timeout, err := time.ParseDuration(flagValue("test.timeout")); err == nil && timeout > 0 {
		if timeout > 2*time.Minute {
			timeout -= time.Minute
		}
		kept = append(kept, "-test.timeout="+timeout.String())
	}
	return kept
}

func copyLines(r io.Reader, prefix string, mu *sync.Mutex) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for s.Scan() {
		mu.Lock()
		fmt.Printf("%s%s\n", prefix, s.Text())
		mu.Unlock()
	}
	if err := s.Err(); err != nil {
		mu.Lock()
		fmt.Printf("%sthe rest of this output is dropped: %v\n", prefix, err)
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r) // the copy must not block on a full pipe
	}
}
