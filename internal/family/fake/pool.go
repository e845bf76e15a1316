// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package fake holds hand-written fakes of the family seams, for the tests of the generic
// code that calls them.
package fake

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Pool is a finite pool of machines of the type "small", leased to claims by name/uid, as
// family.Pool asks; it records what it was asked. Its family is "fakepool".
type Pool struct {
	mu   sync.Mutex
	free []string
	held map[string]string // holder -> machine
	// Report is what Keep reports.
	Report   family.PoolReport
	released []string
	scopes   []family.Scope
}

var _ family.Pool = (*Pool)(nil)

// NewPool is a pool of the named machines, all free.
func NewPool(machines ...string) *Pool {
	return &Pool{free: machines, held: map[string]string{}}
}

func (p *Pool) Name() string { return "fakepool" }

func (p *Pool) Offer(_ context.Context, s family.Scope) (map[string]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scopes = append(p.scopes, s)
	return map[string]int{"small": len(p.free)}, nil
}

func (p *Pool) Lease(_ context.Context, s family.Scope, c family.PoolClaim) (family.PoolLease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scopes = append(p.scopes, s)
	holder := c.Name + "/" + c.UID
	m, ok := p.held[holder]
	if !ok {
		if len(p.free) == 0 {
			return family.PoolLease{}, fmt.Errorf("%w: type %s has none in standby", family.ErrPoolExhausted, c.NodeType)
		}
		m, p.free = p.free[0], p.free[1:]
		p.held[holder] = m
	}
	return family.PoolLease{Parameters: map[string]string{"server_number": m, "lease_holder": holder}, ProviderID: "pool://" + m,
		NodeType: "small"}, nil
}

func (p *Pool) Release(_ context.Context, _ family.Scope, c family.PoolClaim) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	holder := c.Name + "/" + c.UID
	if m, ok := p.held[holder]; ok {
		delete(p.held, holder)
		p.free = append(p.free, m)
		p.released = append(p.released, m)
	}
	return nil
}

func (p *Pool) Keep(ctx context.Context, _ family.Scope, live func(context.Context, string, string) (bool, error)) (family.PoolReport, error) {
	p.mu.Lock()
	holders := make([]string, 0, len(p.held))
	for h := range p.held {
		holders = append(holders, h)
	}
	p.mu.Unlock()
	for _, h := range holders {
		name, uid, _ := strings.Cut(h, "/")
		ok, err := live(ctx, name, uid)
		if err != nil {
			return family.PoolReport{}, err
		}
		if !ok {
			_ = p.Release(ctx, family.Scope{}, family.PoolClaim{Name: name, UID: uid})
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Report, nil
}

// Free are the machines not leased, in the order they are leased next.
func (p *Pool) Free() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.free...)
}

// Held is the machine leased to each holder (name/uid).
func (p *Pool) Held() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.held))
	for k, v := range p.held {
		out[k] = v
	}
	return out
}

// Released are the machines given back, in order.
func (p *Pool) Released() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.released...)
}

// Scopes are the scopes the pool was called with, in order.
func (p *Pool) Scopes() []family.Scope {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]family.Scope(nil), p.scopes...)
}
