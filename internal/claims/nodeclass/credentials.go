// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// How long a family's verdict on a class's credentials stands before its API is asked again:
// a cheap read, but one per class and not on every reconcile.
const (
	credentialsRecheck       = 5 * time.Minute
	failedCredentialsRecheck = time.Minute
)

// checkFamilyCredentials asks the class's family whether its credentials work
// (family.CredentialsChecker), at most every credentialsRecheck for the same class,
// generation and credentials (every failedCredentialsRecheck after a failure). A check the
// family could not make leaves CredentialsReady unknown.
func (c *Controller) checkFamilyCredentials(ctx context.Context, nc *v1alpha1.TofuNodeClass, env map[string]string) (verdict, error) {
	f, ok := classconfig.Family(c.families, nc)
	if !ok {
		return passed, nil
	}
	checker, ok := f.(family.CredentialsChecker)
	if !ok {
		return passed, nil
	}
	key := verdictKey{class: nc.UID, generation: nc.Generation, input: family.EnvDigest(env)}
	if v, ok := c.credentialChecks.get(key); ok {
		return v, nil
	}
	err := checker.CheckCredentials(ctx, family.Scope{Class: nc, Env: env, Cluster: c.cluster})
	v, verr := familyVerdict(err)
	if verr != nil {
		v = verdict{unknown: true, reason: v1alpha1.ReasonCredentialsUnchecked,
			message: fmt.Sprintf("the %s family could not check the credentials: %v", f.Name(), verr)}
	}
	ttl := credentialsRecheck
	if !v.passed {
		ttl = failedCredentialsRecheck
	}
	c.credentialChecks.put(key, v, ttl)
	return v, nil
}

// verdictCache remembers verdicts for a while, per class and input.
type verdictCache struct {
	clock clock.Clock
	mu    sync.Mutex
	items map[types.UID]cachedVerdict
}

type verdictKey struct {
	class      types.UID
	generation int64
	input      string
}

type cachedVerdict struct {
	key     verdictKey
	verdict verdict
	expires time.Time
}

func newVerdictCache(clk clock.Clock) *verdictCache {
	return &verdictCache{clock: clk, items: map[types.UID]cachedVerdict{}}
}

func (vc *verdictCache) get(key verdictKey) (verdict, bool) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	hit, ok := vc.items[key.class]
	if !ok || hit.key != key || !vc.clock.Now().Before(hit.expires) {
		return verdict{}, false
	}
	return hit.verdict, true
}

func (vc *verdictCache) put(key verdictKey, v verdict, ttl time.Duration) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	vc.items[key.class] = cachedVerdict{key: key, verdict: v, expires: vc.clock.Now().Add(ttl)}
}
