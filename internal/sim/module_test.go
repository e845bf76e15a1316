// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// TestModule applies modules/sim with the pinned tofu, as the runner does: a working
// directory initialised from the module, a 0600 variables file, the local backend and
// FULFILLER_BINARY pointing at this test binary.
func TestModule(t *testing.T) {
	t.Parallel()
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	module, err := filepath.Abs(filepath.Join("..", "..", "modules", "sim"))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cliConfig := filepath.Join(t.TempDir(), "tofurc")
	if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir(),
		"TF_CLI_CONFIG_FILE=" + cliConfig, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1",
		"FULFILLER_BINARY=" + exe, testMainEnv + "=1",
	}
	newDir := func(t *testing.T) *tofuDir {
		d := &tofuDir{t: t, bin: tofu, dir: t.TempDir(), env: env}
		if out, err := d.run(context.Background(), "init", "-input=false", "-no-color", "-from-module="+module); err != nil {
			t.Fatalf("tofu init: %v\n%s", err, out)
		}
		return d
	}

	t.Run("apply joins, destroy powers off", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const name = "sim-module"
		tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
		userData := string(renderUserData(t, joinSpec(t, name, tok)))
		simDir := t.TempDir()
		d := newDir(t)
		d.writeVars(map[string]any{
			"node_name": name, "node_type": "sim-small", "zone": "zone-a", "user_data": userData,
			"labels": testLabels,
			"parameters": map[string]string{
				"sim_dir": simDir, "cpu": "3", "memory": "6Gi", "gpu_resource": "nvidia.com/gpu", "gpu_count": "2",
				"boot_delay": "200ms", "apply_delay": "0", "some_other_module_setting": "ignored",
				// The user data installs nothing: an image that has the node software.
				"image": "node",
			},
		})
		applyOut, err := d.run(ctx, "apply", "-auto-approve", "-input=false", "-json", "-var-file="+varsFile)
		if err != nil {
			t.Fatalf("tofu apply: %v\n%s", err, diagnostics(applyOut))
		}
		stateDir := filepath.Join(simDir, name)
		t.Cleanup(func() { _ = Stop(stateDir, time.Second) })

		outputs := d.outputs(ctx)
		if outputs["provider_id"] != `"sim://sim-module"` || outputs["node_name"] != `"sim-module"` || outputs["addresses"] != `["127.0.0.1"]` {
			t.Errorf("outputs = %v", outputs)
		}
		node := waitForNode(ctx, t, name, nodeReady)
		if node.Spec.ProviderID != "sim://"+name {
			t.Errorf("providerID = %q", node.Spec.ProviderID)
		}
		for res, want := range map[corev1.ResourceName]string{"cpu": "3", "memory": "6Gi", "pods": "110", "nvidia.com/gpu": "2", "ephemeral-storage": "20Gi"} {
			if got := node.Status.Capacity[res]; got.String() != want {
				t.Errorf("capacity %s = %s, want %s", res, got.String(), want)
			}
		}
		info, err := os.Stat(filepath.Join(stateDir, "user-data"))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("user data file: %v, mode %v; want 0600", err, info)
		}
		if data, _ := os.ReadFile(filepath.Join(stateDir, "user-data")); string(data) != userData {
			t.Error("the machine's user data differs from what the module received")
		}
		state, _ := os.ReadFile(filepath.Join(d.dir, "terraform.tfstate"))
		for what, text := range map[string]string{"apply output": applyOut, "state": string(state), "machine log": readLog(stateDir)} {
			if strings.Contains(text, tok.Secret) {
				t.Errorf("the %s shows the token secret", what)
			}
		}
		pid, ok := Running(stateDir)
		if !ok {
			t.Fatal("no machine process after apply")
		}
		if environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err != nil || bytes.Contains(environ, []byte(tok.Secret)) {
			t.Errorf("the machine's environment holds the token (or is unreadable: %v)", err)
		}

		if out, err := d.run(ctx, "destroy", "-auto-approve", "-input=false", "-json", "-var-file="+varsFile); err != nil {
			t.Fatalf("tofu destroy: %v\n%s", err, diagnostics(out))
		}
		err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), nil
		})
		if err != nil {
			t.Errorf("machine process %d survives destroy", pid)
		}
		if _, err := os.Stat(stateDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("state dir after destroy: %v", err)
		}
		if _, err := admin(t).CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("the Node of a deleted server stays until someone deletes it: %v", err)
		}
	})

	t.Run("simulated cloud errors", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const name = "sim-module-sold-out"
		tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
		userData := string(renderUserData(t, joinSpec(t, name, tok)))
		simDir := t.TempDir()
		d := newDir(t)
		vars := func(applyError string) map[string]any {
			return map[string]any{
				"node_name": name, "node_type": "sim-small", "zone": "zone-a", "user_data": userData,
				"parameters": map[string]string{"sim_dir": simDir, "apply_error": applyError},
			}
		}
		for _, tc := range []struct{ applyError, summary, detail string }{
			{"capacity", "local-exec provisioner error", "error: resource_unavailable: server type sim-small is not available in zone-a"},
			{"quota", "local-exec provisioner error", "error: server_limit_exceeded: "},
			{"sold-out", "Invalid value for variable", "parameters.apply_error must be"},
		} {
			d.writeVars(vars(tc.applyError))
			out, err := d.run(ctx, "apply", "-auto-approve", "-input=false", "-json", "-var-file="+varsFile)
			if err == nil {
				t.Fatalf("apply_error=%s: apply succeeded", tc.applyError)
			}
			if !hasDiagnostic(out, tc.summary, tc.detail) {
				t.Errorf("apply_error=%s: no error diagnostic %q with %q in:\n%s", tc.applyError, tc.summary, tc.detail, diagnostics(out))
			}
			if strings.Contains(out, tok.Secret) {
				t.Errorf("apply_error=%s: the output shows the token secret", tc.applyError)
			}
		}
		if _, err := os.Stat(filepath.Join(simDir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a server that failed to create got a state dir: %v", err)
		}
		d.writeVars(vars(""))
		if out, err := d.run(ctx, "destroy", "-auto-approve", "-input=false", "-json", "-var-file="+varsFile); err != nil {
			t.Fatalf("tofu destroy: %v\n%s", err, diagnostics(out))
		}
	})
}

const varsFile = "fulfiller.tfvars.json"

// tofuDir is one tofu working directory.
type tofuDir struct {
	t   *testing.T
	bin string
	dir string
	env []string
}

func (d *tofuDir) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.bin, args...)
	cmd.Dir = d.dir
	cmd.Env = d.env
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (d *tofuDir) writeVars(vars map[string]any) {
	d.t.Helper()
	data, err := json.Marshal(vars)
	if err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, varsFile), data, 0o600); err != nil {
		d.t.Fatal(err)
	}
}

// outputs returns each output's JSON value.
func (d *tofuDir) outputs(ctx context.Context) map[string]string {
	d.t.Helper()
	out, err := d.run(ctx, "output", "-json", "-no-color")
	if err != nil {
		d.t.Fatalf("tofu output: %v\n%s", err, out)
	}
	var raw map[string]struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		d.t.Fatalf("parsing tofu output: %v\n%s", err, out)
	}
	values := map[string]string{}
	for k, v := range raw {
		var compact bytes.Buffer
		_ = json.Compact(&compact, v.Value)
		values[k] = compact.String()
	}
	return values
}

type diagnostic struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
}

// jsonDiagnostics reads the diagnostics of tofu's -json output.
func jsonDiagnostics(out string) []diagnostic {
	var diags []diagnostic
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var msg struct {
			Type       string     `json:"type"`
			Diagnostic diagnostic `json:"diagnostic"`
		}
		if json.Unmarshal(sc.Bytes(), &msg) == nil && msg.Type == "diagnostic" {
			diags = append(diags, msg.Diagnostic)
		}
	}
	return diags
}

func hasDiagnostic(out, summary, detail string) bool {
	for _, d := range jsonDiagnostics(out) {
		if d.Severity == "error" && d.Summary == summary && strings.Contains(d.Detail, detail) {
			return true
		}
	}
	return false
}

// diagnostics renders the diagnostics of a -json run for a failure message (or the raw
// output when there are none).
func diagnostics(out string) string {
	diags := jsonDiagnostics(out)
	if len(diags) == 0 {
		return out
	}
	var b strings.Builder
	for _, d := range diags {
		b.WriteString(d.Severity + ": " + d.Summary + ": " + d.Detail + "\n")
	}
	return b.String()
}
