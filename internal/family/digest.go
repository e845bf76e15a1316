// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package family

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
)

// EnvDigest identifies a class's credentials (a Scope's Env) without holding them: callers
// key what they learnt with some credentials (a check's verdict, a catalogue, a client) by it.
func EnvDigest(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s=%d:%s;", len(k), k, len(env[k]), env[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}
