// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"testing"
	"time"
)

func TestTokenExtension(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ttl := 10 * time.Minute
	limit := now.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		expires time.Time
		limit   time.Time
		want    time.Time
		extend  bool
	}{
		{"plenty left", now.Add(6 * time.Minute), limit, now.Add(6 * time.Minute), false},
		{"less than half left", now.Add(4 * time.Minute), limit, now.Add(ttl), true},
		{"capped at the limit", now.Add(time.Minute), now.Add(3 * time.Minute), now.Add(3 * time.Minute), true},
		{"already at the limit", now.Add(time.Minute), now.Add(time.Minute), now.Add(time.Minute), false},
		{"expired tokens stay expired", now.Add(-time.Second), limit, now.Add(-time.Second), false},
	} {
		got, extend := tokenExtension(now, tc.expires, ttl, tc.limit)
		if !got.Equal(tc.want) || extend != tc.extend {
			t.Errorf("%s: tokenExtension = %s, %v; want %s, %v", tc.name, got, extend, tc.want, tc.extend)
		}
	}
}
