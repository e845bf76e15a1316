// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// checkModule reads the module's HCL and checks the module contract.
func checkModule(source string) (string, error) {
	if !filepath.IsAbs(source) {
		return v1alpha1.ReasonModuleNotFound, fmt.Errorf("module source %q must be an absolute path", source)
	}
	if info, err := os.Stat(source); err != nil || !info.IsDir() {
		return v1alpha1.ReasonModuleNotFound, fmt.Errorf("module source %s is not a folder", source)
	}
	mod, err := tfrunner.InspectModule(source)
	if err != nil {
		return v1alpha1.ReasonInvalidModule, err
	}
	if err := mod.CheckContract(); err != nil {
		return v1alpha1.ReasonInvalidModule, err
	}
	return "", nil
}
