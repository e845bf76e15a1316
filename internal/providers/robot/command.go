// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Environment of the command besides the webservice's (EnvUser, EnvPassword, EnvEndpoint).
const (
	// EnvSSHKey holds the fulfiller's SSH private key (OpenSSH or PEM format).
	EnvSSHKey = "HROBOT_SSH_KEY"
	// EnvKubeconfig is the kubeconfig of the cluster holding the inventory, which the runner
	// gives tofu's provisioners (tfrunner.ClusterKubeconfigEnv); EnvBackendKubeconfig, the
	// kubernetes state backend's, is read when it is unset; without either the in-cluster
	// configuration is used.
	EnvKubeconfig        = tfrunner.ClusterKubeconfigEnv
	EnvBackendKubeconfig = "KUBE_CONFIG_PATH"
)

// InventoryPool is the statelock inventory pool of Robot servers; items are server numbers.
const InventoryPool = "robot"

// Main is `fulfiller robot`, run by modules/hetzner-robot's provisioners:
//
//	fulfiller robot user-data --user-data-file PATH           (the user data from ROBOT_USER_DATA)
//	fulfiller robot activate  --server N --path warm|cold [--host-key KEY] --user-data-file PATH ...
//	fulfiller robot release   --server N ...
//	fulfiller robot probe     --server N --host-key KEY
//
// A flag not given on the command line is read from its ROBOT_* variable (flagEnv), so that
// a provisioner runs the command without a shell: `interpreter = ["fulfiller", "robot"]`,
// `command = "activate"`, the values in its `environment`. Credentials come from the
// environment (HROBOT_USER, HROBOT_PASSWORD, HROBOT_SSH_KEY), the inventory through
// FULFILLER_KUBECONFIG (the runner's), KUBE_CONFIG_PATH or the pod's service account.
// Progress goes to stdout; a failure is one line on stderr, "robot error <Reason>: <message>",
// and exit code 1.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, os.Getenv, os.Stdout, os.Stderr)
}

// EnvUserData holds the claim's user data for `fulfiller robot user-data`, which writes it to
// the --user-data-file; it is never a flag, so it is on no command line.
const EnvUserData = "ROBOT_USER_DATA"

// flagEnv names the variable each operation reads a flag from when the command line does not
// give it. A release installs a standby, named robot-<server>, so it reads no ROBOT_HOSTNAME
// (the module's variables name the claim's node there).
var flagEnv = map[string]map[string]string{
	"user-data": {"user-data-file": "ROBOT_USER_DATA_FILE"},
	"activate": {
		"server": "ROBOT_SERVER", "path": "ROBOT_PATH", "host-key": "ROBOT_HOST_KEY",
		"user-data-file": "ROBOT_USER_DATA_FILE", "remove-user-data-file": "ROBOT_REMOVE_USER_DATA_FILE",
		"hostname": "ROBOT_HOSTNAME", "image": "ROBOT_IMAGE", "drives": "ROBOT_DRIVES",
		"ssh-host": "ROBOT_SSH_HOST", "ssh-port": "ROBOT_SSH_PORT",
		"inventory-namespace": "ROBOT_NAMESPACE", "holder": "ROBOT_HOLDER",
		"rescue-timeout": "ROBOT_RESCUE_TIMEOUT", "install-timeout": "ROBOT_INSTALL_TIMEOUT",
		"warm-timeout": "ROBOT_WARM_TIMEOUT", "poll-interval": "ROBOT_POLL_INTERVAL",
	},
	"release": {
		"server": "ROBOT_SERVER", "released-apart": "ROBOT_RELEASE_APART",
		"image": "ROBOT_IMAGE", "drives": "ROBOT_DRIVES",
		"ssh-host": "ROBOT_SSH_HOST", "ssh-port": "ROBOT_SSH_PORT",
		"inventory-namespace": "ROBOT_NAMESPACE", "holder": "ROBOT_HOLDER",
		"rescue-timeout": "ROBOT_RESCUE_TIMEOUT", "poll-interval": "ROBOT_POLL_INTERVAL",
	},
	"probe": {"server": "ROBOT_SERVER", "host-key": "ROBOT_HOST_KEY"},
}

const usage = "usage: fulfiller robot user-data|activate|release|probe [flags]"

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	op := args[0]
	envOf, ok := flagEnv[op]
	if !ok {
		fmt.Fprintf(stderr, "fulfiller robot: unknown operation %q (user-data, activate, release, probe)\n", op)
		return 2
	}
	fs := flag.NewFlagSet("robot "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.Int("server", 0, "server number")
	path := fs.String("path", string(Warm), "activation path: warm or cold")
	hostKey := fs.String("host-key", "", "host key recorded at the server's install (authorized_keys format)")
	userDataFile := fs.String("user-data-file", "", "file with the claim's cloud-init user data")
	removeUserData := fs.Bool("remove-user-data-file", false, "remove the user data's file when the activation ends")
	releasedApart := fs.Bool("released-apart", false, "do nothing: another resource of the module releases the server")
	hostname := fs.String("hostname", "", "hostname of an install (default robot-<server>)")
	image := fs.String("image", "", "installimage image of an install")
	drives := fs.String("drives", "/dev/sda,/dev/sdb", "comma-separated drives of an install")
	sshHost := fs.String("ssh-host", "", "SSH address instead of the server's main IP")
	sshPort := fs.Int("ssh-port", 22, "SSH port")
	namespace := fs.String("inventory-namespace", "", "namespace of the inventory leases (records host keys and states)")
	holder := fs.String("holder", "", "the claim holding the server's lease (guards what is recorded)")
	rescueTimeout := fs.Duration("rescue-timeout", 10*time.Minute, "how long to wait for the rescue system")
	installTimeout := fs.Duration("install-timeout", 30*time.Minute, "how long installimage and the first boot may take")
	warmTimeout := fs.Duration("warm-timeout", 2*time.Minute, "how long to wait for a standby server's SSH")
	poll := fs.Duration("poll-interval", 5*time.Second, "how often to try an SSH endpoint again")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fulfiller robot %s: unexpected arguments %q\n", op, fs.Args())
		return 2
	}
	if err := flagsFromEnv(fs, envOf, getenv); err != nil {
		fmt.Fprintf(stderr, "fulfiller robot %s: %v\n", op, err)
		return 2
	}
	if op == "user-data" {
		if *userDataFile == "" {
			fmt.Fprintln(stderr, "fulfiller robot user-data: --user-data-file (ROBOT_USER_DATA_FILE) is required")
			return 2
		}
		if err := WriteUserData(*userDataFile, getenv(EnvUserData)); err != nil {
			fmt.Fprintf(stderr, "robot error %s: %s\n", robotrules.ReasonFailed, oneLine(err.Error()))
			return 1
		}
		return 0
	}
	if *server <= 0 {
		fmt.Fprintln(stderr, "fulfiller robot: --server N (ROBOT_SERVER) is required")
		return 2
	}
	if op == "activate" && *removeUserData && *userDataFile != "" {
		defer func() {
			if err := os.Remove(*userDataFile); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				fmt.Fprintf(stderr, "robot: removing the user data's file: %v\n", err)
			}
		}()
	}
	if op == "release" && *releasedApart {
		fmt.Fprintf(stdout, "robot: server %d is released by the module's release resource\n", *server)
		return 0
	}

	fail := func(err error) int {
		fmt.Fprintf(stderr, "robot error %s: %s\n", Reason(err), oneLine(err.Error()))
		return 1
	}
	a, err := newActivator(getenv, *namespace, *holder, stdout)
	if err != nil {
		return fail(err)
	}
	a.SSHHost, a.SSHPort, a.PollInterval = *sshHost, *sshPort, *poll
	a.RescueTimeout, a.InstallTimeout, a.WarmTimeout = *rescueTimeout, *installTimeout, *warmTimeout
	driveList := strings.Split(*drives, ",")

	switch op {
	case "activate":
		var userData []byte
		if *userDataFile != "" {
			if userData, err = os.ReadFile(*userDataFile); err != nil {
				return fail(fmt.Errorf("reading user data: %w", err))
			}
		}
		out, err := a.Activate(ctx, Activation{
			Server: *server, Path: Path(*path), HostKey: *hostKey, UserData: userData,
			Hostname: *hostname, Image: *image, Drives: driveList,
		})
		if err != nil {
			if rerr := recordFailure(ctx, a.Recorder, *server, err); rerr != nil {
				fmt.Fprintf(stderr, "robot: recording the failure of server %d: %v\n", *server, rerr)
			}
			return fail(err)
		}
		if a.Recorder != nil {
			// A server that activated has no failures in a row.
			if err := a.Recorder.Record(ctx, *server, map[string]string{AttrFailures: "", AttrLastFailure: ""}); err != nil {
				return fail(err)
			}
		}
		fmt.Fprintf(stdout, "robot: server %d activated (%s) at %s\n", *server, *path, out.Address)
	case "release":
		if rec, ok := a.Recorder.(InventoryRecorder); ok {
			it, err := rec.Inventory.Get(ctx, strconv.Itoa(*server))
			if err != nil {
				return fail(err)
			}
			if it.Attributes[AttrState] == StateUnverified {
				// Not provably ours (in use outside the pool, or another host key): nothing is
				// installed over it. The pool keeper probes it.
				fmt.Fprintf(stdout, "robot: server %d is unverified (%s); released without a reinstall\n", *server, it.Attributes[AttrLastFailure])
				return 0
			}
		}
		out, err := a.Release(ctx, Release{Server: *server, Hostname: *hostname, Image: *image, Drives: driveList})
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "robot: server %d released; reinstalling at %s\n", *server, out.Address)
	case "probe":
		state, err := a.Probe(ctx, *server, *hostKey)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, state)
	}
	return 0
}

// recordFailure counts a failed activation on the server's lease: one more failure in a row
// and its reason. A server that was not in standby or presented another host key is not
// provably ours: it becomes unverified, and nothing will be installed over it.
func recordFailure(ctx context.Context, rec Recorder, server int, err error) error {
	ir, ok := rec.(InventoryRecorder)
	if !ok {
		return nil
	}
	reason := Reason(err)
	switch reason {
	case robotrules.ReasonNotStandby, robotrules.ReasonHostKeyMismatch, robotrules.ReasonInstallFailed:
	default:
		return nil // not the server's fault
	}
	it, gerr := ir.Inventory.Get(ctx, strconv.Itoa(server))
	if gerr != nil {
		return gerr
	}
	attrs := failureAttrs(it, reason)
	if reason != robotrules.ReasonInstallFailed {
		attrs[AttrState] = StateUnverified
	}
	return ir.Record(ctx, server, attrs)
}

func newActivator(getenv func(string) string, namespace, holder string, log io.Writer) (*Activator, error) {
	c, signer, err := clientAndSigner(getenv)
	if err != nil {
		return nil, err
	}
	a := &Activator{Client: c, Signer: signer, Log: log}
	if namespace != "" {
		rec, err := newInventoryRecorder(getenv, namespace, holder)
		if err != nil {
			return nil, err
		}
		a.Recorder = rec
	}
	return a, nil
}

// clientAndSigner are the Robot webservice client and the SSH key of the credentials in
// getenv (HROBOT_USER, HROBOT_PASSWORD, HROBOT_SSH_KEY, ...).
func clientAndSigner(getenv func(string) string) (*Client, ssh.Signer, error) {
	cfg, err := ClientConfigFromEnv(getenv)
	if err != nil {
		return nil, nil, err
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	keyPEM := getenv(EnvSSHKey)
	if keyPEM == "" {
		return nil, nil, fmt.Errorf("%w: %s not set", ErrInvalidCredentials, EnvSSHKey)
	}
	signer, err := ssh.ParsePrivateKey([]byte(keyPEM))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s is not an SSH private key: %w", ErrInvalidCredentials, EnvSSHKey, err)
	}
	return c, signer, nil
}

// InventoryRecorder records attributes on servers' inventory items, guarded by the holder.
type InventoryRecorder struct {
	Inventory statelock.LeasePool
	Holder    string
}

func (r InventoryRecorder) Record(ctx context.Context, server int, attrs map[string]string) error {
	if err := r.Inventory.SetAttributes(ctx, strconv.Itoa(server), r.Holder, attrs); err != nil {
		return fmt.Errorf("recording %v of server %d: %w", keys(attrs), server, err)
	}
	return nil
}

func newInventoryRecorder(getenv func(string) string, namespace, holder string) (Recorder, error) {
	var cfg *rest.Config
	var err error
	if path := cmp.Or(getenv(EnvKubeconfig), getenv(EnvBackendKubeconfig)); path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("configuring the inventory's cluster client: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("building the inventory's cluster client: %w", err)
	}
	return InventoryRecorder{Inventory: statelock.LeasePool{Reader: c, Writer: c, Namespace: namespace, Pool: InventoryPool}, Holder: holder}, nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// WriteUserData writes a claim's user data to path, readable by its owner only, replacing what
// is there.
func WriteUserData(path, userData string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing the user data: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing the user data: %w", err)
	}
	if _, err := io.WriteString(f, userData); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing the user data: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the user data: %w", err)
	}
	return nil
}

// flagsFromEnv sets each flag the command line did not give from its variable in envOf, when
// that variable is set and not empty.
func flagsFromEnv(fs *flag.FlagSet, envOf map[string]string, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, env := range envOf {
		v := getenv(env)
		if given[name] || v == "" {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("%s=%q for --%s: %w", env, v, name, err)
		}
	}
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Reason names the condition of an activation or release error.
func Reason(err error) string {
	var rl *RateLimitedError
	var mismatch *HostKeyMismatchError
	switch {
	case errors.Is(err, ErrInvalidCredentials):
		return robotrules.ReasonInvalidCredentials
	case errors.Is(err, ErrServerNotFound):
		return robotrules.ReasonServerNotFound
	case errors.As(err, &rl):
		return robotrules.ReasonRateLimited
	case errors.As(err, &mismatch):
		return robotrules.ReasonHostKeyMismatch
	case errors.Is(err, ErrNotStandby):
		return robotrules.ReasonNotStandby
	case errors.Is(err, ErrInstallFailed):
		return robotrules.ReasonInstallFailed
	case errors.Is(err, ErrRescueUnreachable):
		return robotrules.ReasonRescueUnreachable
	case IsCode(err, CodeBootNotAvailable):
		return robotrules.ReasonBootNotAvailable
	case IsCode(err, CodeResetNotAvailable), IsCode(err, CodeResetManualActive):
		return robotrules.ReasonResetNotAvailable
	case IsCode(err, CodeInvalidInput):
		return robotrules.ReasonInvalidInput
	case errors.Is(err, statelock.ErrNotHolder), errors.Is(err, statelock.ErrUnknownItem):
		return robotrules.ReasonInventory
	}
	return robotrules.ReasonFailed
}
