// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultStopGrace is how long `sim stop` waits after SIGTERM before SIGKILL.
const DefaultStopGrace = 10 * time.Second

const usage = `usage: fulfiller-dev sim <command> [flags]
       fulfiller-sim <command> [flags]

Simulated machines, the stand-in for VMs and servers in tests and the local environment.

commands:
  start --state-dir DIR --name NAME --user-data FILE [--in-place] [flags]
                    power a machine on in the background (idempotent); with
                    --in-place this process becomes the machine
  run --config FILE run a machine in the foreground until SIGTERM
  stop --state-dir DIR
                    power a machine off (idempotent)
`

// Main runs the `fulfiller-dev sim` command (and cmd/fulfiller-sim); args are what follows
// "sim". It returns the exit code.
func Main(args []string) int {
	return mainTo(args, os.Stdout, os.Stderr)
}

func mainTo(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "start":
		err = startCommand(args[1:], stdout, stderr)
	case "run":
		err = runCommand(args[1:], stdout, stderr)
	case "stop":
		err = stopCommand(args[1:], stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "fulfiller-dev sim: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "fulfiller-dev sim %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

var errUsage = errors.New("usage")

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fulfiller-dev sim "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return errUsage
	}
	return nil
}

func startCommand(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("start", stderr)
	stateDir := fs.String("state-dir", "", "folder of the machine's state: config, log, pid, kubelet credentials (required)")
	name := fs.String("name", "", "machine name, also the hostname (required)")
	userData := fs.String("user-data", "", "file holding the cloud-init user data (required)")
	cpu := fs.String("cpu", "2", "CPU capacity")
	memory := fs.String("memory", "4Gi", "memory capacity")
	pods := fs.String("pods", "110", "pod capacity")
	storage := fs.String("ephemeral-storage", "20Gi", "ephemeral-storage capacity")
	gpuResource := fs.String("gpu-resource", "", "extended resource name of the GPUs, e.g. nvidia.com/gpu")
	gpuCount := fs.String("gpu-count", "0", "number of GPUs")
	bootDelay := fs.Duration("boot-delay", 0, "time from power-on to cloud-init")
	heartbeat := fs.Duration("heartbeat-interval", DefaultHeartbeatInterval, "Lease renewal interval")
	neverJoin := fs.Bool("never-join", false, "boot but never join the cluster")
	address := fs.String("address", "127.0.0.1", "InternalIP the Node reports")
	cniDelay := fs.Duration("cni-delay", 0, "time from registration until the network plugin is up (Node Ready, NetworkUnavailable False)")
	cniNever := fs.Bool("cni-never", false, "the network plugin never comes up")
	gpuDelay := fs.Duration("gpu-delay", 0, "time from registration until the device plugin registers the GPUs (allocatable 0 before)")
	gpuNever := fs.Bool("gpu-never", false, "the device plugin never registers the GPUs")
	image := fs.String("image", ImageNode, "image the machine boots from: node (has the node software) or stock (a stock Ubuntu 24.04, Ubuntu 22.04 or Debian 12, see --os)")
	system := fs.String("os", "ubuntu-24.04", "the image's operating system: ubuntu-24.04, ubuntu-22.04, debian-12, debian-13 or rocky-9")
	arch := fs.String("arch", "amd64", "the machine's architecture: amd64 or arm64")
	packageDelay := fs.Duration("package-delay", 0, "time each package operation takes (an apt-get update or install, a download)")
	faultCommand := fs.String("package-fault", "", `make these commands fail: the program's name, then words each of which must be in one of its arguments ("apt-get install", "curl containerd-2.1.4", "kubeadm join")`)
	faultTimes := fs.Int("package-fault-times", 0, "how often --package-fault fails before the command succeeds (0: every time)")
	faultMessage := fs.String("package-fault-message", "", "the failing command's last line (default: the real program's words)")
	inPlace := fs.Bool("in-place", false, "be the machine instead of starting a process for it: say on stdout that it runs, point stdout and stderr at its log and run it (the caller starts this in the background and reads stdout until it closes)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct{ name, value string }{{"state-dir", *stateDir}, {"name", *name}, {"user-data", *userData}} {
		if f.value == "" {
			missing = append(missing, "--"+f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	capacity := corev1.ResourceList{}
	for res, v := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *memory, corev1.ResourcePods: *pods, corev1.ResourceEphemeralStorage: *storage,
	} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("%s capacity %q: %w", res, v, err)
		}
		capacity[res] = q
	}
	if *gpuResource != "" {
		q, err := resource.ParseQuantity(*gpuCount)
		if err != nil {
			return fmt.Errorf("--gpu-count %q: %w", *gpuCount, err)
		}
		capacity[corev1.ResourceName(*gpuResource)] = q
	}
	userDataPath, err := filepath.Abs(*userData)
	if err != nil {
		return err
	}
	if _, err := os.Stat(userDataPath); err != nil {
		return fmt.Errorf("user data: %w", err)
	}
	cfg := MachineConfig{
		Name:              *name,
		UserDataPath:      userDataPath,
		Capacity:          capacity,
		BootDelay:         *bootDelay,
		NeverJoin:         *neverJoin,
		CNIDelay:          *cniDelay,
		CNINever:          *cniNever,
		GPUDelay:          *gpuDelay,
		GPUNever:          *gpuNever,
		HeartbeatInterval: *heartbeat,
		StateDir:          *stateDir,
		Image:             *image,
		OS:                *system,
		Arch:              *arch,
		PackageDelay:      *packageDelay,
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: *address},
			{Type: corev1.NodeHostName, Address: *name},
		},
	}
	if *faultCommand != "" {
		cfg.PackageFault = &PackageFault{Command: *faultCommand, Times: *faultTimes, Message: *faultMessage}
	}
	if *inPlace {
		return StartHere(cfg, stdout)
	}
	if err := Start(cfg, nil); err != nil {
		return err
	}
	pid, _ := Running(*stateDir)
	reportRunning(stderr, cfg, pid)
	return nil
}

// runCommand runs a machine in the foreground. A machine whose join failed stays powered on,
// as a real server would, until it is stopped; the failure is in its log.
func runCommand(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	configPath := fs.String("config", "", "machine config written by start (required)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *configPath == "" {
		return errors.New("missing --config")
	}
	data, err := os.ReadFile(*configPath)
	if err != nil {
		return err
	}
	var cfg MachineConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("parsing %s: %w", *configPath, err)
	}
	runUntilStopped(cfg, stdout)
	return nil
}

// runUntilStopped runs the machine until SIGTERM or SIGINT.
func runUntilStopped(cfg MachineConfig, log io.Writer) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := RunMachine(ctx, cfg, log); err != nil {
		fmt.Fprintf(log, "%s machine %s: join failed, staying powered on without a kubelet until stopped\n", time.Now().UTC().Format(time.RFC3339Nano), cfg.Name)
		<-ctx.Done()
	}
}

func stopCommand(args []string, stderr io.Writer) error {
	fs := newFlagSet("stop", stderr)
	stateDir := fs.String("state-dir", "", "folder of the machine's state (required)")
	grace := fs.Duration("grace", DefaultStopGrace, "wait after SIGTERM before SIGKILL")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *stateDir == "" {
		return errors.New("missing --state-dir")
	}
	return Stop(*stateDir, *grace)
}
