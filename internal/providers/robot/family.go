package robot

import (
	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Family is the Hetzner Robot node-type family (spec.family: robot).
type Family struct{}

var (
	_ family.Family     = (*Family)(nil)
	_ family.ErrorRules = (*Family)(nil)
)

// NewFamily returns the Hetzner Robot family.
func NewFamily() *Family { return &Family{} }

func (*Family) Name() string { return v1alpha1.FamilyRobot }

// ErrorRules classify the reasons `fulfiller robot` prints.
func (*Family) ErrorRules() tfrunner.Rules { return Rules{} }
