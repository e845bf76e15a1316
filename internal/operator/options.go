package operator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/utils/env"
)

func init() {
	coreoptions.Injectables = append(coreoptions.Injectables, &Options{})
}

type optionsKey struct{}

// Options are the fulfiller's own controller flags; each also reads an environment variable.
// They are parsed with Karpenter's, from the same command line.
type Options struct {
	Namespace         string
	Executor          string
	RunsDir           string
	TofuPath          string
	MaxConcurrentRuns int
	RunnerKubeconfig  string
}

func (o *Options) AddFlags(fs *coreoptions.FlagSet) {
	fs.StringVar(&o.Namespace, "fulfiller-namespace", env.WithDefaultString("FULFILLER_NAMESPACE", "fulfiller"), "Namespace of claim states, user data and runs")
	fs.StringVar(&o.Executor, "executor", env.WithDefaultString("FULFILLER_EXECUTOR", "local"), "Where tofu runs: local (child processes)")
	fs.StringVar(&o.RunsDir, "runs-dir", env.WithDefaultString("FULFILLER_RUNS_DIR", "/var/lib/fulfiller/runs"), "Folder of local runs (working directories and logs)")
	fs.StringVar(&o.TofuPath, "tofu-path", env.WithDefaultString("FULFILLER_TOFU", "tofu"), "The tofu binary")
	fs.IntVar(&o.MaxConcurrentRuns, "max-concurrent-runs", env.WithDefaultInt("FULFILLER_MAX_CONCURRENT_RUNS", 8), "Tofu runs in progress at once")
	fs.StringVar(&o.RunnerKubeconfig, "runner-kubeconfig", env.WithDefaultString("FULFILLER_RUNNER_KUBECONFIG", ""), "Kubeconfig local runs use for the kubernetes state backend (empty: in-cluster)")
}

func (o *Options) Parse(fs *coreoptions.FlagSet, args ...string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		return fmt.Errorf("parsing flags: %w", err)
	}
	if o.Executor != "local" {
		return fmt.Errorf("executor %q is not supported (want local)", o.Executor)
	}
	if o.MaxConcurrentRuns < 1 {
		return errors.New("max-concurrent-runs must be at least 1")
	}
	return nil
}

func (o *Options) ToContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, optionsKey{}, o)
}

// FromContext returns the options parsed into ctx.
func FromContext(ctx context.Context) *Options {
	o, _ := ctx.Value(optionsKey{}).(*Options)
	return o
}
