// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"reflect"
	"testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// A claim's recorded module reaches its runs as a folder or as a source the run fetches; a
// generic class's error rules go with them, a family's class has none.
func TestRequestModuleAndRules(t *testing.T) {
	if moduleDir("/modules/sim") != "/modules/sim" || moduleSource("/modules/sim") != "" {
		t.Error("a folder is not passed as moduleDir")
	}
	pinned := "git::https://git.example.com/m.git//sim?ref=0123456789abcdef0123456789abcdef01234567"
	if moduleDir(pinned) != "" || moduleSource(pinned) != pinned {
		t.Error("a remote source is not passed as moduleSource")
	}
	nc := test.TwoTypeClass()
	nc.Spec.Family = v1alpha1.FamilySim
	nc.Spec.ErrorRules = []v1alpha1.ErrorRule{{Code: "sold_out", Class: "InsufficientCapacity"}}
	if got := errorRules(&Claim{Class: nc}); got != nil {
		t.Errorf("a family's class passes rules %+v", got)
	}
	nc.Spec.Family = ""
	want := []tfrunner.ErrorRule{{Code: "sold_out", Class: tfrunner.Capacity}}
	if got := errorRules(&Claim{Class: nc}); !reflect.DeepEqual(got, want) {
		t.Errorf("a generic class passes rules %+v, want %+v", got, want)
	}
	if got := errorRules(&Claim{}); got != nil {
		t.Errorf("a claim whose class is gone passes rules %+v", got)
	}
}
