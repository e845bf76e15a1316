// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// env is a command's environment.
type env map[string]string

func (e env) get(k string) string { return e[k] }

func runCommand(t *testing.T, e env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, e.get, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The user data reaches its file from the environment, readable by its owner only, also
// over a file that was there with wider permissions.
func TestCommandUserData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".robot-user-data")
	if err := os.WriteFile(path, []byte("an earlier, longer content"), 0o644); err != nil {
		t.Fatal(err)
	}
	const userData = "#cloud-config\nwrite_files: []\n"
	code, _, stderr := runCommand(t, env{EnvUserData: userData, "ROBOT_USER_DATA_FILE": path}, "user-data")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != userData {
		t.Errorf("file holds %q (%v), want %q", got, err, userData)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}

	if code, _, stderr := runCommand(t, env{EnvUserData: userData}, "user-data"); code != 2 || !strings.Contains(stderr, "ROBOT_USER_DATA_FILE") {
		t.Errorf("without a file: exit %d, %q", code, stderr)
	}
}

// A release whose module releases the server apart does nothing, and needs no credentials;
// without ROBOT_RELEASE_APART the same release reads its server from the environment and
// goes on to the webservice (here refused for want of credentials).
func TestCommandReleasedApart(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCommand(t, env{"ROBOT_SERVER": "7", "ROBOT_RELEASE_APART": "true"}, "release")
	if code != 0 || !strings.Contains(stdout, "server 7 is released by the module's release resource") {
		t.Errorf("released apart: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = runCommand(t, env{"ROBOT_SERVER": "7"}, "release")
	if code != 1 || !strings.HasPrefix(stderr, "robot error InvalidCredentials: ") {
		t.Errorf("a release: exit %d, stderr %q", code, stderr)
	}
}

// An activation that ends, however it ends, removes the user data's file when asked to.
func TestCommandRemovesUserDataFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".robot-user-data")
	if err := WriteUserData(path, "#cloud-config\n"); err != nil {
		t.Fatal(err)
	}
	e := env{"ROBOT_SERVER": "7", "ROBOT_USER_DATA_FILE": path}
	if code, _, stderr := runCommand(t, e, "activate"); code != 1 || !strings.HasPrefix(stderr, "robot error InvalidCredentials: ") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the file is gone without ROBOT_REMOVE_USER_DATA_FILE: %v", err)
	}
	e["ROBOT_REMOVE_USER_DATA_FILE"] = "true"
	if code, _, stderr := runCommand(t, e, "activate"); code != 1 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the file is left after the activation: %v", err)
	}
}

func TestCommandUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		e    env
		want string
	}{
		{args: nil, want: "usage: fulfiller robot user-data|activate|release|probe"},
		{args: []string{"install"}, want: `unknown operation "install"`},
		{args: []string{"activate"}, want: "--server N (ROBOT_SERVER) is required"},
		{args: []string{"release", "--server", "3", "extra"}, want: `unexpected arguments ["extra"]`},
		{args: []string{"activate"}, e: env{"ROBOT_SERVER": "3", "ROBOT_SSH_PORT": "ssh"}, want: `ROBOT_SSH_PORT="ssh" for --ssh-port`},
		{args: []string{"activate", "--nope"}, want: "flag provided but not defined: -nope"},
	} {
		code, _, stderr := runCommand(t, tc.e, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// A flag the command line gives wins over its variable; an empty variable leaves the default;
// a release reads no ROBOT_HOSTNAME (it installs a standby, robot-<server>).
func TestFlagsFromEnv(t *testing.T) {
	t.Parallel()
	e := env{
		"ROBOT_SERVER": "12", "ROBOT_SSH_PORT": "2222", "ROBOT_SSH_HOST": "", "ROBOT_HOSTNAME": "node-a",
		"ROBOT_POLL_INTERVAL": "250ms", "ROBOT_IMAGE": "from-env",
	}
	parse := func(op string, args ...string) *flag.FlagSet {
		t.Helper()
		fs := flag.NewFlagSet(op, flag.ContinueOnError)
		fs.Int("server", 0, "")
		fs.Int("ssh-port", 22, "")
		fs.String("ssh-host", "default-host", "")
		fs.String("hostname", "", "")
		fs.String("image", "", "")
		fs.Duration("poll-interval", 5*time.Second, "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := flagsFromEnv(fs, flagEnv[op], e.get); err != nil {
			t.Fatal(err)
		}
		return fs
	}
	value := func(fs *flag.FlagSet, name string) string { return fs.Lookup(name).Value.String() }

	fs := parse("activate", "--image", "from-flag")
	for name, want := range map[string]string{
		"server": "12", "ssh-port": "2222", "ssh-host": "default-host", "hostname": "node-a",
		"poll-interval": "250ms", "image": "from-flag",
	} {
		if got := value(fs, name); got != want {
			t.Errorf("activate --%s = %q, want %q", name, got, want)
		}
	}
	if got := value(parse("release"), "hostname"); got != "" {
		t.Errorf("release --hostname = %q from ROBOT_HOSTNAME, want the default", got)
	}
}

// modules/hetzner-robot runs `fulfiller robot` with no shell, as the image has none: every
// provisioner's interpreter is ["fulfiller", "robot"] and its command one of the command's
// operations, so no script text is run.
func TestModuleNeedsNoShell(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "modules", "hetzner-robot", "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("module files: %v %v", files, err)
	}
	schema := &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "resource", LabelNames: []string{"type", "name"}}}}
	resourceSchema := &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "provisioner", LabelNames: []string{"type"}}}}
	p := hclparse.NewParser()
	provisioners := 0
	for _, path := range files {
		f, diags := p.ParseHCLFile(path)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		content, _, diags := f.Body.PartialContent(schema)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		for _, res := range content.Blocks {
			rc, _, diags := res.Body.PartialContent(resourceSchema)
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			for _, prov := range rc.Blocks {
				provisioners++
				where := prov.DefRange.String()
				if prov.Labels[0] != "local-exec" {
					t.Errorf("%s: a %s provisioner", where, prov.Labels[0])
					continue
				}
				attrs, diags := prov.Body.JustAttributes()
				if diags.HasErrors() {
					t.Fatal(diags)
				}
				var interpreter []string
				if a, ok := attrs["interpreter"]; ok {
					v, diags := a.Expr.Value(nil)
					if diags.HasErrors() {
						t.Fatalf("%s: interpreter: %v", where, diags)
					}
					for _, e := range v.AsValueSlice() {
						interpreter = append(interpreter, e.AsString())
					}
				}
				if !slices.Equal(interpreter, []string{"fulfiller", "robot"}) {
					t.Errorf("%s: interpreter %q, want [fulfiller robot]", where, interpreter)
				}
				v, diags := attrs["command"].Expr.Value(nil)
				if diags.HasErrors() {
					t.Errorf("%s: command is not a literal: %v", where, diags)
					continue
				}
				if _, ok := flagEnv[v.AsString()]; !ok {
					t.Errorf("%s: command %q is no operation of fulfiller robot", where, v.AsString())
				}
			}
		}
	}
	if provisioners != 4 {
		t.Errorf("%d provisioners, want the module's 4", provisioners)
	}
}
