package devenv

import (
	"os"
	"path/filepath"
	"testing"
)

// The module wants absolute folders; `make demo` passes a relative --dir.
func TestVarsAreAbsolute(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("env", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(Layout{"env"}.ServerFile(), []byte("127.0.0.1:6443\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars, err := Vars("env", "modules")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"SIM_DIR", "MODULES"} {
		if !filepath.IsAbs(vars[k]) {
			t.Errorf("%s = %q, want an absolute path", k, vars[k])
		}
	}
	if vars["API_SERVER"] != "127.0.0.1:6443" {
		t.Errorf("API_SERVER = %q", vars["API_SERVER"])
	}
}
