// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// A source that is slow to fetch holds up only the classes that use it: another source
// resolves meanwhile, and the classes asking for the slow one share its one fetch.
func TestModuleResolverFetchesSourcesApart(t *testing.T) {
	r := newModuleResolver(clocktesting.NewFakeClock(time.Now()), "", t.TempDir(), time.Minute)
	release, fetching := make(chan struct{}), make(chan struct{})
	var slowFetches atomic.Int32
	r.fetch = func(ctx context.Context, source, _ string, _ map[string]string) (*tfrunner.ResolvedModule, string, error) {
		if source == "git::https://slow.example/m.git?ref=v1" {
			if slowFetches.Add(1) == 1 {
				close(fetching)
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, "", ctx.Err()
			}
		}
		return &tfrunner.ResolvedModule{Source: source, Pinned: source, Digest: "sha256:" + source}, "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var slow sync.WaitGroup
	for range 3 {
		slow.Go(func() {
			if got, _, err := r.resolve(ctx, "git::https://slow.example/m.git?ref=v1", "", nil); err != nil || got.Digest != "sha256:git::https://slow.example/m.git?ref=v1" {
				t.Errorf("the slow source resolved to %+v, %v", got, err)
			}
		})
	}
	// The fast source resolves while the slow one is being fetched.
	<-fetching
	fast := make(chan error, 1)
	go func() {
		_, _, err := r.resolve(ctx, "git::https://fast.example/m.git?ref=v1", "", nil)
		fast <- err
	}()
	select {
	case err := <-fast:
		if err != nil {
			t.Errorf("the fast source: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the fast source waited for the slow one's fetch")
	}
	close(release)
	slow.Wait()
	if n := slowFetches.Load(); n != 1 {
		t.Errorf("the slow source was fetched %d times for three classes at once, want 1", n)
	}
}
