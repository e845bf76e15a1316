// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// Main is the `fulfiller run` command; args are the arguments after "run":
//
//	--request PATH  the request file (written by WriteRequest)
//	--result PATH   where to write the result (default: result.json next to the request,
//	                unless --termination-log is given)
//	--work-dir PATH run in this folder instead of the request's workDir (a Job's emptyDir)
//	--termination-log PATH
//	                write the result, compact and at most MaxTerminationMessage bytes, in
//	                place to PATH (a container's termination message file)
//	--remove-request
//	                remove the request file once it is read: it holds the claim's user data
//	                and credentials (a local run's; a Job's is a read-only Secret volume)
//
// The run log goes to stdout (the local executor points stdout at run.log; in a Job it is
// what `kubectl logs` shows). SIGINT and SIGTERM interrupt tofu, which releases its state
// lock, and the run ends as Cancelled. The exit code is 0 when the run succeeded, 1 when it
// failed and 2 on bad usage. rules are the error rules of every family the binary knows; the
// request's family picks its own.
func Main(args []string, rules RuleSet) int {
	return runMain(args, rules, os.Stdout, os.Stderr)
}

func runMain(args []string, rules RuleSet, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("run", flag.ContinueOnError)
	flags.SetOutput(stderr)
	requestPath := flags.String("request", "", "path of the request file")
	resultPath := flags.String("result", "", "path of the result file (default: "+ResultFileName+" next to the request)")
	workDir := flags.String("work-dir", "", "run in this folder instead of the request's workDir")
	terminationLog := flags.String("termination-log", "", "write the compact result in place to this file (a container's termination message)")
	removeRequest := flags.Bool("remove-request", false, "remove the request file once it is read")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *requestPath == "" || flags.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: fulfiller run --request PATH [--result PATH] [--work-dir PATH] [--termination-log PATH] [--remove-request]")
		return 2
	}
	if *resultPath == "" && *terminationLog == "" {
		*resultPath = filepath.Join(filepath.Dir(*requestPath), ResultFileName)
	}

	// Signals stay caught until we return: a second one does not kill us while tofu stops.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var res Result
	req, err := ReadRequest(*requestPath)
	if *removeRequest {
		if rmErr := os.Remove(*requestPath); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "fulfiller run: removing the request: %v\n", rmErr)
		}
	}
	if err != nil {
		now := time.Now().UTC()
		res = Result{Started: now, Finished: now, Error: NewRunError(Unknown, "reading request: "+err.Error())}
		fmt.Fprintf(stderr, "fulfiller run: reading request: %v\n", err)
	} else {
		if *workDir != "" {
			req.WorkDir = *workDir
		}
		runCtx := ctx
		if req.Deadline > 0 {
			var cancel context.CancelFunc
			runCtx, cancel = context.WithTimeout(ctx, req.Deadline)
			defer cancel()
		}
		res = Run(runCtx, req, stdout, rules)
	}
	if *terminationLog != "" {
		if err := writeTerminationLog(*terminationLog, res); err != nil {
			fmt.Fprintf(stderr, "fulfiller run: %v\n", err)
			return 1
		}
	}
	if *resultPath != "" {
		if err := WriteResult(*resultPath, res); err != nil {
			fmt.Fprintf(stderr, "fulfiller run: %v\n", err)
			return 1
		}
	}
	if !res.Succeeded {
		return 1
	}
	return 0
}

// Paths inside a runner container.
const (
	// TerminationLogPath is the runner container's termination message file: the runner
	// writes its result there (compact, at most MaxTerminationMessage bytes), and the
	// controller reads it from the pod's status instead of parsing logs.
	TerminationLogPath = "/dev/termination-log"
	// MaxTerminationMessage is what a kubelet keeps of a termination message.
	MaxTerminationMessage = 4096
)

// TerminationMessage encodes res for a container's termination message: compact JSON of at
// most MaxTerminationMessage bytes. Outputs other than those Result already names go first,
// then addresses, then the error message is shortened.
func TerminationMessage(res Result) ([]byte, error) {
	data, err := json.Marshal(res)
	if err != nil || len(data) <= MaxTerminationMessage {
		return data, err
	}
	res.Phases = nil
	if data, err = json.Marshal(res); err != nil || len(data) <= MaxTerminationMessage {
		return data, err
	}
	res.Outputs = nil
	if data, err = json.Marshal(res); err != nil || len(data) <= MaxTerminationMessage {
		return data, err
	}
	res.Addresses = nil
	if data, err = json.Marshal(res); err != nil || len(data) <= MaxTerminationMessage {
		return data, err
	}
	if res.Error != nil {
		res.Error = &RunError{Class: res.Error.Class, Message: message.ShortenTo(res.Error.Message, 100), RetryAfter: res.Error.RetryAfter}
	}
	if data, err = json.Marshal(res); err != nil || len(data) <= MaxTerminationMessage {
		return data, err
	}
	return nil, errors.New("result does not fit in a termination message")
}

// writeTerminationLog writes the result in place: a termination message file is a bind
// mount that cannot be replaced by a rename.
func writeTerminationLog(path string, res Result) error {
	data, err := TerminationMessage(res)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing termination message: %w", err)
	}
	return nil
}
