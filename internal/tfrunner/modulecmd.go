// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ModuleMain is `fulfiller module check DIR|SOURCE`: the class's static contract check
// (CheckModuleDir) for module authors and CI. A SOURCE that is no folder is fetched as a class
// fetches it (FetchModule: `tofu get`, the tofu of --tofu or on PATH) and its files are
// checked. It prints every violation with its file and line and returns 1 on any (or when the
// source cannot be fetched), 0 when the module keeps the contract and 2 for a usage error.
// With --apply, a module that keeps the contract is then applied and destroyed once, as a
// claim's runs would (applyRoundTrip); a failed apply or destroy returns 1.
func ModuleMain(args []string, stdout, stderr io.Writer) int {
	const usage = "usage: fulfiller module check [--tofu PATH] [--apply [--var KEY=VALUE]... [--env KEY=VALUE]...\n" +
		"       [--node-type TYPE] [--zone ZONE] [--log FILE]] [--version CONSTRAINT] DIR|SOURCE\n\n" +
		"check that the module in DIR, or at a module source OpenTofu accepts (git::https://...,\n" +
		"an HTTP archive, a registry address with --version's constraint), keeps the module\n" +
		"contract (modules/README.md): every violation is printed with its file and line, and\n" +
		"the exit code is 1 on any.\n\n" +
		"--apply then applies the module once and destroys what it made, as a claim's runs do,\n" +
		"with a state of its own in a temporary folder: --var sets the module's parameters,\n" +
		"--env the environment of tofu and its providers (credentials), --log keeps the runs'\n" +
		"logs. It makes real machines on real infrastructure, for as long as the round trip lasts.\n"
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("module check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	tofu := fs.String("tofu", "tofu", "the tofu binary that fetches a SOURCE (and, with --apply, runs the module)")
	constraint := fs.String("version", "", "a registry SOURCE's version constraint (default: its newest release)")
	apply := fs.Bool("apply", false, "apply the module once and destroy what it made")
	var rt roundTrip
	fs.Var(keyValues{&rt.params}, "var", "a parameter of the module, KEY=VALUE (repeatable; with --apply)")
	fs.Var(keyValues{&rt.env}, "env", "a variable of tofu's environment, KEY=VALUE (repeatable; with --apply)")
	fs.StringVar(&rt.nodeType, "node-type", "module-check", "the node_type input (with --apply)")
	fs.StringVar(&rt.zone, "zone", "module-check", "the zone input (with --apply)")
	fs.StringVar(&rt.logPath, "log", "", "append the runs' logs (tofu's -json lines) to this file (with --apply)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	arg := fs.Arg(0)
	dir, name := filepath.Clean(arg), filepath.Clean(arg)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		if IsLocalSource(arg) || strings.HasPrefix(arg, ".") {
			fmt.Fprintf(stderr, "fulfiller module check: %s is not a folder\n", arg)
			return 2
		}
		fetched, cleanup, err := fetchForCheck(arg, *constraint, *tofu)
		defer cleanup()
		if err != nil {
			fmt.Fprintf(stderr, "fulfiller module check: %v\n", err)
			return 1
		}
		dir, name = fetched.Dir, arg
		fmt.Fprintf(stderr, "%s: fetched %s%s%s\n", arg, fetched.Digest, commitNote(fetched.Commit), versionNote(fetched.Version))
	}
	violations, err := CheckModuleDir(dir)
	if err != nil {
		fmt.Fprintf(stderr, "fulfiller module check: %v\n", err)
		return 1
	}
	for _, v := range violations {
		switch {
		case v.File == "":
			fmt.Fprintf(stdout, "%s: %s\n", name, v.Message)
		case name != dir: // a fetched source: its files by their path in the source
			fmt.Fprintf(stdout, "%s: %s\n", name, v.String())
		default:
			fmt.Fprintln(stdout, filepath.Join(dir, v.String()))
		}
	}
	if len(violations) > 0 {
		fmt.Fprintf(stderr, "%s: %d violation(s) of the module contract\n", name, len(violations))
		return 1
	}
	fmt.Fprintf(stdout, "%s: keeps the module contract\n", name)
	if !*apply {
		return 0
	}
	rt.tofu, rt.module, rt.name = *tofu, dir, name
	return rt.run(stdout, stderr)
}

// roundTrip is `module check --apply`: one apply of a module and the destroy of what it
// made, through Run as a claim's runs go, with a local state in a temporary folder.
type roundTrip struct {
	tofu, module, name string
	nodeType, zone     string
	params, env        map[string]string
	logPath            string
}

// checkUserData is the user data the round trip passes: a valid cloud-config without a
// join token, so a machine it makes boots but joins no cluster.
const checkUserData = "#cloud-config\n"

// The state stays when the destroy fails: it is the only record of what is left to destroy.
func (rt roundTrip) run(stdout, stderr io.Writer) int {
	work, err := os.MkdirTemp("", "fulfiller-module-check-")
	if err != nil {
		fmt.Fprintf(stderr, "fulfiller module check: %v\n", err)
		return 1
	}
	log := io.Discard
	if rt.logPath != "" {
		f, err := os.OpenFile(rt.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "fulfiller module check: %v\n", err)
			return 1
		}
		defer func() { _ = f.Close() }()
		log = f
	}
	params := map[string]string{}
	maps.Copy(params, rt.params)
	req := Request{
		ModuleDir: rt.module,
		Backend:   Backend{Type: "local", Config: map[string]string{"path": filepath.Join(work, "terraform.tfstate")}},
		Variables: map[string]any{
			VarNodeName: "module-check", VarNodeType: rt.nodeType, VarZone: rt.zone,
			VarUserData: checkUserData, VarLabels: map[string]string{}, VarParameters: params,
		},
		Env:      rt.env,
		TofuPath: rt.tofu,
	}
	code := 0
	for _, op := range []Operation{Apply, Destroy} {
		req.Name, req.Operation, req.WorkDir = "module-check-"+string(op)+"-1", op, filepath.Join(work, string(op))
		fmt.Fprintf(stderr, "%s: %s ...\n", rt.name, op)
		// Each run has its own interrupt: one that stops the apply still lets the destroy run.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		res := Run(ctx, req, log, nil)
		stop()
		switch {
		case !res.Succeeded && op == Destroy:
			fmt.Fprintf(stdout, "%s: destroy failed: %s\n", rt.name, res.Error.Error())
			fmt.Fprintf(stdout, "%s: what the apply made may still exist; its state is kept in %s for `tofu destroy`\n", rt.name, req.Backend.Config["path"])
			return 1
		case !res.Succeeded:
			fmt.Fprintf(stdout, "%s: apply failed: %s\n", rt.name, res.Error.Error())
			code = 1 // a failed apply may have made something: the destroy still runs
		case op == Apply:
			fmt.Fprintf(stdout, "%s: apply made provider ID %s (node name %s, addresses %v)\n", rt.name, res.ProviderID, cmp.Or(res.NodeName, "module-check"), res.Addresses)
		default:
			fmt.Fprintf(stdout, "%s: destroy removed what the apply made\n", rt.name)
		}
	}
	_ = os.RemoveAll(work)
	return code
}

// keyValues is a repeatable KEY=VALUE flag.
type keyValues struct{ m *map[string]string }

func (kv keyValues) String() string {
	if kv.m == nil {
		return ""
	}
	return fmt.Sprint(*kv.m)
}

func (kv keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	if *kv.m == nil {
		*kv.m = map[string]string{}
	}
	(*kv.m)[k] = v
	return nil
}

// fetchForCheck fetches a source into a temporary folder, which cleanup removes.
func fetchForCheck(source, constraint, tofu string) (*ResolvedModule, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	got, work, err := FetchRemoteModule(ctx, tofu, source, constraint, os.TempDir(), nil)
	if err != nil {
		return nil, func() {}, err
	}
	return got, func() { _ = os.RemoveAll(work) }, nil
}
