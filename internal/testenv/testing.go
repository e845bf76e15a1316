package testenv

import (
	"context"
	"os"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/fulfiller-sh/fulfiller/api/crds"
)

// DefaultCRDs are the CRDs every control plane of the project carries: Karpenter's, from the
// pinned module, and the fulfiller's.
func DefaultCRDs() []*apiextensionsv1.CustomResourceDefinition {
	return append(append([]*apiextensionsv1.CustomResourceDefinition{}, karpenterapis.CRDs...), crds.CRDs...)
}

// RunMain starts one control plane for a test package, runs its tests and stops it, whatever
// they do. Tools that are missing fail the package: nothing is skipped.
func RunMain(m *testing.M, into **ControlPlane, opts Options) int {
	cp, err := Start(context.Background(), opts)
	if err != nil {
		os.Stderr.WriteString("testenv: starting the control plane: " + err.Error() + "\n")
		return 1
	}
	*into = cp
	code := m.Run()
	if err := cp.Stop(); err != nil {
		os.Stderr.WriteString("testenv: stopping the control plane: " + err.Error() + "\n")
		if code == 0 {
			code = 1
		}
	}
	return code
}
