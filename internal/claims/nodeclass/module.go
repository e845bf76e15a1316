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

// checkModule reads the module's HCL and checks the module contract (tfrunner.CheckModuleDir,
// the check `fulfiller module check` runs), naming every violation with its file and line.
func checkModule(source string) (string, error) {
	if !filepath.IsAbs(source) {
		return v1alpha1.ReasonModuleNotFound, fmt.Errorf("module source %q must be an absolute path", source)
	}
	if info, err := os.Stat(source); err != nil || !info.IsDir() {
		return v1alpha1.ReasonModuleNotFound, fmt.Errorf("module source %s is not a folder", source)
	}
	violations, err := tfrunner.CheckModuleDir(source)
	if err == nil {
		err = tfrunner.ViolationsError(violations)
	}
	if err != nil {
		return v1alpha1.ReasonInvalidModule, err
	}
	return "", nil
}
