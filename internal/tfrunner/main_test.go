// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTerminationMessageFits(t *testing.T) {
	now := time.Now().UTC()
	small := Result{Operation: Apply, Succeeded: true, ProviderID: "sim://a/1", Started: now, Finished: now,
		Outputs: map[string]json.RawMessage{"node_name": json.RawMessage(`"a"`)}}
	data, err := TerminationMessage(small)
	if err != nil || strings.Contains(string(data), "\n") || !strings.Contains(string(data), `"node_name"`) {
		t.Errorf("small result: %s, %v", data, err)
	}
	big := small
	big.Outputs = map[string]json.RawMessage{"blob": json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)}
	data, err = TerminationMessage(big)
	if err != nil || len(data) > MaxTerminationMessage || strings.Contains(string(data), "blob") || !strings.Contains(string(data), "sim://a/1") {
		t.Errorf("big result: %d bytes, %v", len(data), err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil || back.ProviderID != "sim://a/1" || !back.Started.Equal(now) {
		t.Errorf("decoded %+v, %v", back, err)
	}
}

func TestMainWritesResult(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := runMain(nil, nil, &stdout, &stderr); code != 2 {
		t.Errorf("no arguments: exit %d", code)
	}
	dir := t.TempDir()
	if code := runMain([]string{"--request", filepath.Join(dir, RequestFileName)}, nil, &stdout, &stderr); code != 1 {
		t.Errorf("missing request: exit %d", code)
	}
	res, err := ReadResult(filepath.Join(dir, ResultFileName))
	if err != nil || res.Succeeded || res.Error == nil || !strings.HasPrefix(res.Error.Message, "reading request") {
		t.Errorf("result: %+v, %v", res, err)
	}
}
