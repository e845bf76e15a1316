// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package preflight

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// Label marks the short-lived token the authentication probe mints.
const Label = "fulfiller.sh/preflight"

// TokenAuthProbe checks that the API server authenticates bootstrap tokens
// (--enable-bootstrap-token-auth), which no authorizer question can tell: it mints a token
// that lives two minutes, authenticates with it (a SelfSubjectReview) and deletes it. A
// token the API server has not seen yet is refused for a moment (its authenticator reads
// Secrets through an informer), so a refusal counts only if it lasts Wait. A result is kept
// for TTL, so many classes share one probe.
type TokenAuthProbe struct {
	Client client.Client
	// Config reaches the API server; its credentials are not used.
	Config *rest.Config
	Wait   time.Duration // default 10s
	TTL    time.Duration // default 5m

	mu      sync.Mutex
	checked time.Time
	failure *Failure
}

// Check returns a failure when bootstrap tokens are not authenticated, nil when they are.
func (p *TokenAuthProbe) Check(ctx context.Context, now time.Time) (*Failure, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ttl := p.TTL
	if ttl == 0 {
		ttl = 5 * time.Minute
	}
	if !p.checked.IsZero() && now.Sub(p.checked) < ttl {
		return p.failure, nil
	}
	failure, err := p.probe(ctx)
	if err != nil {
		return nil, err
	}
	p.checked, p.failure = now, failure
	return failure, nil
}

func (p *TokenAuthProbe) probe(ctx context.Context) (*Failure, error) {
	tok, err := bootstrap.NewToken()
	if err != nil {
		return nil, err
	}
	secret := bootstrap.TokenSecret(tok, bootstrap.TokenSecretOptions{
		Expires: time.Now().Add(2 * time.Minute), Description: "fulfiller join preflight: is bootstrap-token authentication on?",
		Labels: map[string]string{Label: "true"},
	})
	if err := p.Client.Create(ctx, secret); err != nil {
		return nil, fmt.Errorf("creating the preflight token: %w", err)
	}
	// Should the delete fail, the token expires in two minutes and the token cleaner removes it.
	defer func() { _ = p.Client.Delete(context.WithoutCancel(ctx), secret) }()
	cfg := rest.AnonymousClientConfig(p.Config)
	cfg.BearerToken = tok.String()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	wait := p.Wait
	if wait == 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		_, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		switch {
		case err == nil:
			return nil, nil
		case !apierrors.IsUnauthorized(err):
			return nil, fmt.Errorf("authenticating with the preflight token: %w", err)
		case time.Now().After(deadline):
			return &Failure{v1alpha1.ReasonBootstrapTokenAuthDisabled,
				"the API server refuses bootstrap tokens: machines could not join (start kube-apiserver with --enable-bootstrap-token-auth)"}, nil
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
