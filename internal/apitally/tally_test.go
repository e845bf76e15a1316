// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package apitally

import (
	"strings"
	"sync"
	"testing"
)

func TestTally(t *testing.T) {
	var tally Tally
	a := Key{Endpoint: "GET /servers/{id}", Token: TokenID("one"), Agent: "fulfiller-controller", Status: 200}
	b := Key{Endpoint: "POST /servers", Token: TokenID("two"), Agent: "hcloud-terraform/1.58.0", Status: 201}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { tally.Add(a) })
	}
	wg.Wait()
	before := tally.Counts()
	tally.Add(b)
	tally.Add(a)
	got := tally.Counts()
	if len(got) != 2 || got[0].Key != a || got[0].Requests != 11 || got[1].Key != b || got[1].Requests != 1 {
		t.Fatalf("counts %+v; want 11 of %+v, then 1 of %+v", got, a, b)
	}
	between := Minus(got, before)
	if len(between) != 2 || between[0].Requests != 1 || between[1].Requests != 1 {
		t.Errorf("between %+v; want one of each", between)
	}
	if n := Sum(got, nil); n != 12 {
		t.Errorf("sum %d; want 12", n)
	}
	if n := Sum(got, func(k Key) bool { return k.Method() == "POST" }); n != 1 {
		t.Errorf("POST requests %d; want 1", n)
	}
}

func TestTokenID(t *testing.T) {
	token := strings.Repeat("x", 64)
	id := TokenID(token)
	if len(id) != 8 || strings.Contains(token, id) || id != TokenID(token) || id == TokenID(token[1:]+"y") {
		t.Errorf("TokenID %q: want 8 hexadecimal digits, the same for the same token, another for another", id)
	}
	if TokenID("") != "" {
		t.Errorf("TokenID of nothing %q; want none", TokenID(""))
	}
}
