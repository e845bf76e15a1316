package kubevirt

import (
	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Family is the KubeVirt node-type family (spec.family: kubevirt).
type Family struct{}

var _ family.Family = (*Family)(nil)

// NewFamily returns the KubeVirt family.
func NewFamily() *Family { return &Family{} }

func (*Family) Name() string { return v1alpha1.FamilyKubeVirt }
