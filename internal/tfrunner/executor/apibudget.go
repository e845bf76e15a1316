// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// APIDemand is what one run takes from one API request budget its cloud enforces.
type APIDemand struct {
	// Budget names the budget, as a person reads it and without any secret; runs whose
	// demands name the same budget share it (e.g. one Hetzner Cloud project's).
	Budget string
	// Limit requests per Per is what the cloud allows; it refills evenly.
	Limit int
	Per   time.Duration
	// Requests is an estimate of the requests one run makes against it.
	Requests int
}

// APIBudgets keeps, per budget a family's cloud enforces, the requests left for runs: it
// starts full, refills at the cloud's rate, admits a run while every budget it draws on holds
// the requests it is estimated to make, and takes them when it starts. It counts only the
// fulfiller's runs: other clients of the same credentials (a cloud controller manager, a CSI
// driver) spend the cloud's budget unseen, and the runs' own retries on a rate-limit error
// are the cloud's last word.
type APIBudgets struct {
	Clock clock.PassiveClock
	// Demands says what a run takes from which budgets (none: it is not limited).
	Demands func(tfrunner.Request) []APIDemand

	mu   sync.Mutex
	left map[string]*apiBucket
}

type apiBucket struct {
	left float64
	at   time.Time
	// limit and per are the cloud's, as the last demand on the budget said.
	limit int
	per   time.Duration
}

// NewAPIBudgets returns budgets with the demands of runs.
func NewAPIBudgets(c clock.PassiveClock, demands func(tfrunner.Request) []APIDemand) *APIBudgets {
	return &APIBudgets{Clock: c, Demands: demands}
}

// bucket returns d's budget refilled until now.
func (a *APIBudgets) bucket(d APIDemand, now time.Time) *apiBucket {
	if a.left == nil {
		a.left = map[string]*apiBucket{}
	}
	b, ok := a.left[d.Budget]
	if !ok {
		b = &apiBucket{left: float64(d.Limit), at: now}
		a.left[d.Budget] = b
	}
	b.limit, b.per = d.Limit, d.Per
	b.refill(now)
	return b
}

// refill adds what the budget regained since it was last looked at.
func (b *apiBucket) refill(now time.Time) {
	if now.After(b.at) {
		b.left = min(float64(b.limit), b.left+now.Sub(b.at).Seconds()*float64(b.limit)/b.per.Seconds())
		b.at = now
	}
}

// rate is the requests the budget regains per second.
func (d APIDemand) rate() float64 { return float64(d.Limit) / d.Per.Seconds() }

// need is what a run must find left: its estimate, but never more than the whole budget.
func (d APIDemand) need() float64 { return float64(min(d.Requests, d.Limit)) }

func (a *APIBudgets) demands(req tfrunner.Request) []APIDemand {
	if a.Demands == nil {
		return nil
	}
	var out []APIDemand
	for _, d := range a.Demands(req) {
		if d.Limit > 0 && d.Per > 0 && d.Requests > 0 {
			out = append(out, d)
		}
	}
	return out
}

// Admit implements Budget.
func (a *APIBudgets) Admit(_ context.Context, req tfrunner.Request, _ Load) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.Clock.Now()
	for _, d := range a.demands(req) {
		b := a.bucket(d, now)
		if b.left >= d.need() {
			continue
		}
		wait := time.Duration((d.need() - b.left) / d.rate() * float64(time.Second)).Round(time.Second)
		return &AdmissionError{Reason: v1alpha1.ReasonWaitingForAPIBudget, RetryAfter: wait,
			Message: fmt.Sprintf("%s allows %d API requests per %s; %d are left for runs, and one %s makes about %d: enough again in %s",
				d.Budget, d.Limit, per(d.Per), int(b.left), req.Operation, d.Requests, wait)}
	}
	return nil
}

// Take spends requests made outside runs from the budget they count in (the orphan
// collector's listing of a project's servers and its deletes): the runs admitted after it
// see what is left.
func (a *APIBudgets) Take(d APIDemand) {
	if d.Limit <= 0 || d.Per <= 0 || d.Requests <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.bucket(d, a.Clock.Now())
	b.left = max(0, b.left-float64(d.Requests))
}

// Left is what d's budget holds now for runs.
func (a *APIBudgets) Left(d APIDemand) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bucket(d, a.Clock.Now()).left
}

// Spend implements Spender.
func (a *APIBudgets) Spend(req tfrunner.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.Clock.Now()
	for _, d := range a.demands(req) {
		b := a.bucket(d, now)
		b.left = max(0, b.left-d.need())
	}
}

var (
	budgetLeftDesc = prometheus.NewDesc("fulfiller_api_budget_requests_left",
		"Requests the fulfiller's runs may still make against a cloud API's rate limit (its own estimate: other clients of the same credentials are not seen), by budget: a family's name for it, a Hetzner Cloud project by a hash of its token, never the token.",
		[]string{"budget"}, nil)
	budgetLimitDesc = prometheus.NewDesc("fulfiller_api_budget_requests_limit",
		"The cloud API's rate limit of a budget: requests per its period, which refill evenly.",
		[]string{"budget", "period"}, nil)
)

var _ prometheus.Collector = (*APIBudgets)(nil)

// Describe implements prometheus.Collector.
func (a *APIBudgets) Describe(ch chan<- *prometheus.Desc) {
	ch <- budgetLeftDesc
	ch <- budgetLimitDesc
}

// Collect implements prometheus.Collector: each budget a run or a request has drawn on, as
// it is now.
func (a *APIBudgets) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.Clock.Now()
	for name, b := range a.left {
		b.refill(now)
		ch <- prometheus.MustNewConstMetric(budgetLeftDesc, prometheus.GaugeValue, b.left, name)
		ch <- prometheus.MustNewConstMetric(budgetLimitDesc, prometheus.GaugeValue, float64(b.limit), name, per(b.per))
	}
}

func per(d time.Duration) string {
	switch d {
	case time.Hour:
		return "hour"
	case time.Minute:
		return "minute"
	case time.Second:
		return "second"
	}
	return d.String()
}
